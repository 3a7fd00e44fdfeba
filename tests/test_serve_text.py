"""Incremental detokenization: deltas concatenate to the full text, also when a character spans
several tokens (a byte-level tokenizer: one token per UTF-8 byte), on the tokenizer the engine
serves (SmolLM2's byte-level BPE) and on a leading-space (SentencePiece-style) one; each step
decodes a window of a few tokens, never the whole output (the `detok-full` fault does)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specscope.serve.textstream import FullTextStream, TextStream


def _bytes_detok(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


@given(text=st.text(max_size=40), cuts=st.lists(st.integers(1, 5), max_size=40))
def test_deltas_concatenate_to_the_text(text: str, cuts: list[int]) -> None:
    ids = list(text.encode("utf-8"))
    stream = TextStream(_bytes_detok)
    out, i = [], 0
    for c in cuts:
        if i >= len(ids):
            break
        out.append(stream.add(ids[i : i + c]))
        i += c
    out.append(stream.add(ids[i:], final=True))
    assert "".join(out) == text
    assert all("\ufffd" not in d for d in out[:-1]) or "\ufffd" in text


def test_incomplete_character_is_held_back() -> None:
    stream = TextStream(_bytes_detok)
    euro = list("€".encode())
    assert stream.add(euro[:2]) == ""
    assert stream.add(euro[2:]) == "€"


def _steps(ids: list[int], cuts: list[int]) -> list[list[int]]:
    """The ids as steps of the given sizes, then one id a step (a step commits 1-4 tokens)."""
    out, i = [], 0
    for c in cuts:
        if i >= len(ids):
            break
        out.append(ids[i : i + c])
        i += c
    return [*out, *([t] for t in ids[i:])] or [[]]


def _streamed(stream: TextStream, steps: list[list[int]]) -> str:
    return "".join(stream.add(s, final=k == len(steps) - 1) for k, s in enumerate(steps))


TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Co", "Cn"), blacklist_characters="\ufffd"),
    min_size=0,
    max_size=80,
) | st.sampled_from(["  leading spaces", "café ñ 日本語 🙂🙂", "a\n\n  b\tc", "€€€ ---- ***"])


@pytest.fixture(scope="module")
def smollm2() -> Callable[[str], list[int]] | None:
    pytest.importorskip("tokenizers")
    from specscope.engine.loader import load_checkpoint, resolve

    return load_checkpoint(resolve("smollm2"))[2]


@pytest.mark.engine
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=TEXT, cuts=st.lists(st.integers(1, 4), max_size=60))
def test_smollm2_deltas_are_the_full_decode(smollm2, text: str, cuts: list[int]) -> None:
    """SmolLM2's byte-level BPE (what the engine serves): a character's bytes split over
    tokens, and tokens split over steps, still stream the text a full decode gives."""
    ids = smollm2.encode(text)
    calls: list[int] = []

    def decode(window: list[int]) -> str:
        calls.append(len(window))
        return smollm2.decode(window)

    steps = _steps(ids, cuts)
    assert _streamed(TextStream(decode), steps) == smollm2.decode(ids)
    # a window holds the last emitted step, the new one and the steps held back because the
    # text at their end stops mid-character (a step of 3 tokens after one of 1, over
    # "\x800" + "\u0800" * 10, never ends a character: it is held to the end): a few steps'
    # tokens beyond such a run, whatever the output's length
    assert max(calls, default=0) <= 32 + _longest_held_run(smollm2, steps)


def _longest_held_run(codec, steps: list[list[int]]) -> int:
    """The most tokens in consecutive steps that end with the text mid-character."""
    ids = [t for s in steps for t in s]
    longest = run = end = 0
    for step in steps:
        end += len(step)
        held = codec.decode(ids[:end]).endswith("\ufffd")
        run = run + len(step) if held else 0
        longest = max(longest, run)
    return longest


@pytest.mark.engine
def test_smollm2_windows_do_not_grow_with_the_output(smollm2) -> None:
    """A 1,000+ token output streamed 1-4 tokens a step decodes windows of a few tokens."""
    ids = smollm2.encode("Le café coûte 3 € — 日本語のテキスト 🙂, and the step time grows. " * 40)
    calls: list[int] = []

    def decode(window: list[int]) -> str:
        calls.append(len(window))
        return smollm2.decode(window)

    assert _streamed(TextStream(decode), _steps(ids, [1, 2, 3, 4] * 400)) == smollm2.decode(ids)
    assert len(ids) > 1000 and max(calls) <= 32


def _metaspace_tokenizer():
    """A Llama-style tokenizer (SentencePiece's leading-space marker, byte fallback, the first
    space stripped on decode), trained here on real text."""
    tk = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tk.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    corpus = [CORPUS] * 4
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", *[f"<0x{b:02X}>" for b in range(256)]],
    )
    tok.train_from_iterator(corpus, trainer)
    return tok


CORPUS = (
    "The step time of a speculative server is the time of one verify pass; the commit length "
    "is how many tokens that pass keeps. Throughput is their ratio, and a drafter pays only "
    "when it commits more than the verify pass costs over a plain step."
)


@settings(max_examples=150, deadline=None)
@given(text=TEXT, cuts=st.lists(st.integers(1, 4), max_size=60))
def test_metaspace_deltas_are_the_full_decode(text: str, cuts: list[int]) -> None:
    """A leading-space tokenizer renders a token differently at the start of a text; the
    window's emitted part renders it the same way, so the new text is still exact."""
    tok = _METASPACE
    ids = tok.encode(text).ids
    full = tok.decode(ids, skip_special_tokens=False)
    stream = TextStream(lambda w: tok.decode(w, skip_special_tokens=False))
    assert _streamed(stream, _steps(ids, cuts)) == full


def test_full_text_stream_is_the_same_text_at_a_growing_cost() -> None:
    """The `detok-full` fault: the same deltas, each step decoding everything so far."""
    ids = list(b"one step at a time, the whole output again")
    calls: list[int] = []

    def decode(window: list[int]) -> str:
        calls.append(len(window))
        return _bytes_detok(window)

    steps = _steps(ids, [3] * 20)
    assert _streamed(FullTextStream(decode), steps) == _streamed(TextStream(_bytes_detok), steps)
    assert calls == sorted(calls) and calls[-1] == len(ids)


_METASPACE = _metaspace_tokenizer()
