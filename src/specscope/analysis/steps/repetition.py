"""Repetition in a generation: a loop that repeats one unit over and over, or text copied from
the prompt.

Why it matters: a model caught in a loop ("island island island ...") is trivially easy to
draft for, so acceptance and commit length soar. Numbers measured over such output describe the
loop, not the workload; a report must say so. Pure: works on the streamed text (and, to place a
loop in tokens, its events' counts).

Method: split the text into words; for each period p (1..MAX_PERIOD words), find the longest
suffix of the word sequence in which word i equals word i - p, allowing a small share of
mismatches (a digit that counts up, a varied word). The loop is the shortest period whose
periodic suffix is longest; it is flagged when it spans at least MIN_REPEATS periods, at
least MIN_LOOP_WORDS words, and at least MIN_SHARE of the generation.

Where a loop starts in tokens (`loop_start_position`): steps carry no text, so the loop's first
character is placed by the stream's own events (each chunk's `n_chars` and `n_tokens`): the
output tokens before the event that carries it. A step that commits any token from there on is
inside the loop; fits of commit length along a generation leave those steps out (a loop
commits 7-8 tokens a step where the answer committed 1-2: its steps describe the loop).

Copying (`copied_share`): the share of the output's word COPY_NGRAM-grams that occur in the
prompt. Prompt-lookup drafters accept copied text almost entirely; for a code edit that is the
workload, for free-form writing it is a model regurgitating its prompt, so reports show it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specscope.trace.model import RequestTrace

MAX_PERIOD = 200  # words
COPY_NGRAM = 8  # words
MIN_REPEATS = 3
MIN_LOOP_WORDS = 24
MIN_SHARE = 0.25
MISMATCH_ALLOWED = 0.05  # share of words in the loop that may differ from one period back
TAIL_WORDS = 3000  # only the end of very long outputs is scanned (loops persist to the end)

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Loop:
    period_words: int  # length of the repeated unit
    loop_words: int  # words in the repeating stretch at the end
    share: float  # loop_words / words of the whole generation
    start_char: int  # where the repeating stretch starts in the text
    unit: str  # the repeated unit (first 120 characters)

    def to_dict(self) -> dict[str, object]:
        return {
            "period_words": self.period_words,
            "loop_words": self.loop_words,
            "share": round(self.share, 4),
            "start_char": self.start_char,
            "unit": self.unit,
        }


def _periodic_suffix(words: list[str], p: int) -> int:
    """Length of the longest suffix in which words[i] == words[i - p] but for a small share."""
    n = len(words)
    mismatches = 0
    best = 0
    for i in range(n - 1, p - 1, -1):
        length = n - i
        if words[i] != words[i - p]:
            mismatches += 1
            if mismatches > 1 + MISMATCH_ALLOWED * length:
                break
        elif mismatches <= MISMATCH_ALLOWED * length:
            best = length
    return best + p if best else 0  # the first period of the stretch matches nothing before it


def find_loop(text: str | None) -> Loop | None:
    """The repetition loop at the end of `text`, or None when there is none worth flagging."""
    if not text:
        return None
    matches = list(_WORD.finditer(text))
    total = len(matches)
    if total < MIN_LOOP_WORDS:
        return None
    tail = matches[-TAIL_WORDS:]
    words = [m.group() for m in tail]
    best_len, best_p = 0, 0
    for p in range(1, min(MAX_PERIOD, len(words) // MIN_REPEATS) + 1):
        length = _periodic_suffix(words, p)
        if length >= MIN_REPEATS * p and length > best_len * 1.05:
            best_len, best_p = length, p
    if not best_p or best_len < MIN_LOOP_WORDS or best_len / total < MIN_SHARE:
        return None
    start = tail[len(words) - best_len].start()
    unit_end = tail[len(words) - best_len + best_p - 1].end()
    return Loop(best_p, best_len, best_len / total, start, text[start:unit_end][:120])


def loop_start_position(trace: RequestTrace) -> int | None:
    """Output tokens before the request's repetition loop (the position, in `Step.output_pos`
    units, of the loop's first token, to the event that carried it), or None without a loop.

    Why by events: the loop is found in the text, the steps are counted in tokens, and only the
    stream's events tie the two (characters and tokens per event). Where the events carry no
    character counts, the loop's share of the characters is taken as its share of the tokens
    (an approximation: tokens per character differ a little between the answer and the loop).
    Scrubbing can lengthen the stored text (a lone surrogate becomes its 6-character escape),
    so the loop's start is scaled to the characters the events carried."""
    text = trace.text
    loop = find_loop(text)
    if loop is None or not text:
        return None
    streamed = sum(c.n_chars for c in trace.chunks)
    tokens = sum(c.n_tokens for c in trace.chunks)
    if streamed <= 0:
        return int(tokens * loop.start_char / len(text))
    at = loop.start_char * streamed / len(text) if streamed != len(text) else loop.start_char
    chars = before = 0
    for c in trace.chunks:
        if chars + c.n_chars > at:
            return before
        chars += c.n_chars
        before += c.n_tokens
    return before


def copied_share(prompt: str | None, text: str | None, n: int = COPY_NGRAM) -> float | None:
    """Share of the output's word n-grams found in the prompt (None when the output is shorter
    than one n-gram or there is no prompt text)."""
    if not prompt or not text:
        return None
    out = _WORD.findall(text)
    if len(out) < n:
        return None
    src = _WORD.findall(prompt)
    seen = {tuple(src[i : i + n]) for i in range(len(src) - n + 1)}
    grams = [tuple(out[i : i + n]) for i in range(len(out) - n + 1)]
    return sum(g in seen for g in grams) / len(grams)
