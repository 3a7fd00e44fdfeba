"""Detokenization of a stream: the text of newly committed token ids, step by step.

Its own module: the response bodies (formatting.py) need the scheduler's request state, and the
scheduler needs these streams (a host fault's step work, faults.py), so they cannot share one.
"""

from __future__ import annotations

from collections.abc import Callable


class TextStream:
    """Incremental detokenization: the text delta of newly committed ids, at O(1) work a step.

    Detokenizing each step's ids on its own breaks real tokenizers (multi-byte characters and
    leading-space rules span tokens); re-rendering the whole output every step costs time that
    grows with the output (what vLLM and TGI avoid, and what `FullTextStream` keeps as a fault).
    So, as they do: two offsets into the ids. The window from `prefix` holds the last emitted
    tokens and the new ones; the new ones' text is the window's text past the text of its
    emitted part (both render the window's first token alike). A window ending in U+FFFD (an
    incomplete character) is held back until the next ids complete it.
    """

    def __init__(self, detokenize: Callable[[list[int]], str]):
        self._detokenize = detokenize
        self._ids: list[int] = []
        self._prefix = 0  # start of the window: the tokens emitted last time
        self._read = 0  # ids up to here have been emitted
        self._parts: list[str] = []
        self._length = 0  # characters sent
        self._joined = ""

    def _send(self, delta: str) -> str:
        self._parts.append(delta)
        self._length += len(delta)
        return delta

    def add(self, ids: list[int], final: bool = False) -> str:
        self._ids += ids
        window = self._ids[self._prefix :]
        emitted = self._detokenize(self._ids[self._prefix : self._read])
        text = self._detokenize(window)
        if len(text) <= len(emitted) or (text.endswith("\ufffd") and not final):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return self._send(text[len(emitted) :])

    @property
    def text(self) -> str:
        """The text sent so far (joined when asked: SGLang's native stream sends it whole)."""
        if len(self._joined) != self._length:
            self._joined = "".join(self._parts)
            self._parts = [self._joined]
        return self._joined


class FullTextStream(TextStream):
    """The whole output re-detokenized at every step, its new suffix sent: the same text as
    `TextStream` at a cost that grows with the output (the `detok-full` fault, docs/faults.md:
    what specscope's own server did before, a host-side drift a diagnosis must name)."""

    def add(self, ids: list[int], final: bool = False) -> str:
        self._ids += ids
        text = self._detokenize(self._ids)
        if not final:
            text = text.rstrip("\ufffd")
        sent = self.text
        if not text.startswith(sent):  # the tokenizer re-rendered earlier text
            common = 0
            for a, b in zip(text, sent, strict=False):
                if a != b:
                    break
                common += 1
            sent = sent[:common]
            self._parts, self._length, self._joined = [sent], len(sent), sent
        return self._send(text[len(sent) :])
