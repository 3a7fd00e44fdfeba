"""Prompts of an exact token length, counted by the server's own tokenizer when it has one.

Why the server's: a prompt of "2048 tokens" must be 2048 in the tokenizer that prefills it, or
context-dependent step times are attributed to the wrong context. Tokenize endpoints:
vLLM/SGLang `POST /tokenize {"prompt": s}` -> `{"tokens": [...], "count": n}`; llama.cpp
`POST /tokenize {"content": s}` -> `{"tokens": [...]}`. Without one, a local `tokenizer.json`
(`--tokenizer`, read with the `tokenizers` library) is used, else a clear error.

Two builders share the counters. `fit_units` cuts real text (a head, a list of natural units
such as lines or sentences, a tail) to exactly n tokens, ending at a unit boundary where it can
and at a word (then a character) inside the next unit where it must; `specscope.probe.workloads`
feeds it code, prose, problems and conversations. `build_synthetic_prompt` makes filler words
of an exact length: kept only as the `synthetic` workload (numbers comparable with old runs),
never the default, since small models answer filler with loops that inflate acceptance.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

AsyncCounter = Callable[[str], Awaitable[int]]

# Beyond any context served today; a prompt is built and held in memory before it is sent, so
# an absurd --prompt-tokens must stop here, not after gigabytes of filler text.
MAX_PROMPT_TOKENS = 1 << 20


def prompt_length_problem(n: int) -> str | None:
    """Why `n` is not a prompt length we build (None: it is)."""
    if not 1 <= n <= MAX_PROMPT_TOKENS:
        return f"--prompt-tokens must be within 1..{MAX_PROMPT_TOKENS}, got {n}"
    return None


# Common words, one token each in most BPE vocabularies (the synthetic workload only).
_WORDS = [
    "the",
    "river",
    "light",
    "water",
    "stone",
    "green",
    "house",
    "world",
    "river",
    "people",
    "table",
    "window",
    "garden",
    "city",
    "music",
    "paper",
    "story",
    "night",
    "morning",
    "letter",
    "mountain",
    "forest",
    "bridge",
    "market",
    "school",
    "summer",
    "winter",
    "doctor",
    "friend",
    "mother",
    "father",
    "village",
    "station",
    "engine",
    "simple",
    "number",
    "little",
    "second",
    "village",
    "yellow",
    "silver",
    "corner",
    "garden",
    "season",
    "animal",
    "ocean",
    "island",
    "valley",
    "field",
    "circle",
    "answer",
    "moment",
    "country",
    "family",
    "history",
    "picture",
    "minute",
    "single",
    "follow",
    "open",
    "begin",
    "carry",
    "change",
]


class PromptError(Exception):
    """No way to count tokens, or the count cannot be met. The message says what to pass."""


class TokenizeError(PromptError):
    """The server's tokenize endpoint answered a count that cannot be true (the server
    misbehaved, not the user): the message keeps the raw value."""


# A tokenize answer lists the ids: ~8 bytes a token, so this fits a million-token prompt.
_MAX_TOKENIZE_ANSWER = 64 << 20
# A token covers at least one byte of text; a tokenizer adds a few special tokens at most.
_SPECIAL_TOKENS_SLACK = 16


def plausible_count(n: int, text: str, where: str) -> int:
    """`n` when a tokenizer could have counted it for `text`, else TokenizeError."""
    if not 0 <= n <= len(text.encode("utf-8")) + _SPECIAL_TOKENS_SLACK:
        raise TokenizeError(
            f"{where} counted {n} tokens for {len(text)} characters of text: "
            "impossible, so no prompt length can be trusted"
        )
    return n


@dataclass
class BuiltPrompt:
    text: str
    tokens: int | None  # as counted; equals the target unless `exact` is False
    exact: bool
    #: Workload category ("code-completion", "chat", ...; "synthetic"), None when unknown.
    category: str | None = None
    #: Where the cut fell: the unit kind ("line", "sentence", "turn", ...), "word", "char",
    #: or "whole" for a prompt used as given.
    boundary: str | None = None
    #: OpenAI `messages` when the prompt is a conversation (then `text` is its plain rendering).
    messages: list[dict[str, str]] | None = None


def load_local_tokenizer(path: str | Path) -> Callable[[str], int]:
    """A counter from a local `tokenizer.json` (raises PromptError with a clear message)."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise PromptError(f"--tokenizer: no tokenizer.json at {path}")
    try:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(p))
    except Exception as e:  # the library raises a bare Exception on a bad file
        raise PromptError(f"--tokenizer: cannot read {p}: {e}") from None
    return LocalCount(tok)


class LocalCount:
    """Tokens of a text in a local tokenizer: a class, not a closure, so that it pickles into
    a `probe --workers` process (which counts streamed delta text with it)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def __call__(self, text: str, *, special: bool = True) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=special).ids)


def delta_counter(local: Callable[..., int]) -> Callable[[str], int]:
    """Count streamed delta text: no special tokens (BOS) per piece."""
    return lambda text: local(text, special=False)


def _parse_count(obj: Any) -> int | None:
    if isinstance(obj, dict):
        c = obj.get("count")
        if isinstance(c, int) and not isinstance(c, bool):
            return c
        toks = obj.get("tokens")
        if isinstance(toks, list):
            return len(toks)
    return None


async def server_counter(
    session: aiohttp.ClientSession,
    base_url: str,
    endpoints: tuple[tuple[str, str], ...],
    timeout_s: float = 10.0,
) -> tuple[AsyncCounter, str] | None:
    """Find the first tokenize endpoint that answers with a count: (counter, "POST /path")."""
    base = base_url.rstrip("/")

    async def ask(path: str, key: str, text: str) -> int | None:
        try:
            async with asyncio.timeout(timeout_s):
                # llama.cpp's /tokenize leaves out BOS unless asked; /completion adds it.
                body = {key: text, "add_special": True} if key == "content" else {key: text}
                async with session.post(base + path, json=body) as resp:
                    if resp.status != 200:
                        return None
                    raw = await resp.content.read(_MAX_TOKENIZE_ANSWER)  # bounded: a hostile
                    n = _parse_count(json.loads(raw))  # server's endless body is cut here
        except (TimeoutError, aiohttp.ClientError, ValueError, RecursionError):
            return None
        return None if n is None else plausible_count(n, text, f"POST {path}")

    for path, key in endpoints:
        if await ask(path, key, "hello world") is not None:

            async def count(text: str, path: str = path, key: str = key) -> int:
                n = await ask(path, key, text)
                if n is None:
                    raise PromptError(f"tokenize endpoint {path} stopped answering")
                return n

            return count, f"POST {path}"
    return None


def synthetic_frame(seed: int, n_tokens: int) -> Frame:
    """Filler words (the `synthetic` workload): one unit per word."""
    rng = random.Random(seed)
    return Frame(
        head="",
        units=[rng.choice(_WORDS) + " " for _ in range(2 * n_tokens + 16)],
        unit_kind="word",
    )


def local_async(counter: Callable[[str], int]) -> AsyncCounter:
    async def count(text: str) -> int:
        return counter(text)

    return count


# -- real text cut at natural boundaries ---------------------------------------------------

_PIECES = re.compile(r"\S+\s*|\s+")


@dataclass(frozen=True)
class Frame:
    """A prompt's shape: fixed `head` and `tail` around a run of `units` (each keeps its own
    trailing whitespace, so joining them gives the original text). `unit_kind` names the
    boundary ("line", "sentence", "turn"); `strip` trims whitespace at the end of the cut
    units (prose before a tail), not for code that must end with its newline."""

    head: str
    units: Sequence[str]
    tail: str = ""
    unit_kind: str = "line"
    strip: bool = True
    # The answer starts with the cut's first unit again, after the tail: a request to return a
    # text edited gets it back from its start (an editor, an "apply" tool), and a model that
    # is shown the opening goes on re-emitting the text rather than commenting on it.
    echo: bool = False


@dataclass(frozen=True)
class Cut:
    """Units `start` to `units` (exclusive), then the first `words` whitespace-separated
    pieces of the next unit, then the first `chars` characters of the piece after those."""

    units: int
    words: int = 0
    chars: int = 0
    start: int = 0


#: Start offsets tried (dropping leading units) for a cut that ends exactly on a unit boundary
#: before falling back to a word or character inside the next unit.
MAX_STARTS = 24
#: Of those, how many are tried with a word of the next unit before cutting a word.
MAX_WORD_STARTS = 8


def render(frame: Frame, cut: Cut, prefix: str = "") -> str:
    body = "".join(frame.units[cut.start : cut.units])
    if cut.words or cut.chars:
        pieces = _PIECES.findall(frame.units[cut.units]) if cut.units < len(frame.units) else []
        body += "".join(pieces[: cut.words])
        if cut.chars and cut.words < len(pieces):
            body += pieces[cut.words][: cut.chars]
    if frame.strip:
        body = body.rstrip()
    opening = frame.units[cut.start].rstrip() if frame.echo and cut.units > cut.start else ""
    return prefix + frame.head + body + frame.tail + opening


def normalized(frame: Frame) -> Frame:
    """The frame with whitespace-only units joined to the unit before them (a cut never ends
    on one). `fit_units` cuts the normalized frame; render a cut it returned with this."""
    out: list[str] = []
    for u in frame.units:
        if out and not u.strip():
            out[-1] += u
        else:
            out.append(u)
    return Frame(frame.head, out, frame.tail, frame.unit_kind, frame.strip, frame.echo)


async def _largest_at_most(
    f: Callable[[int], Awaitable[int]], lo: int, hi: int, start: int, n: int
) -> int:
    """Largest k in [lo, hi] with f(k) <= n, given f(lo) <= n, f nondecreasing (nearly: a
    BPE count can dip by one where pieces merge; the caller measures the result anyway).
    Galloping from `start` keeps it to a few calls when `start` is a good guess."""
    k = min(max(start, lo), hi)
    if await f(k) <= n:
        lo, step = k, 1
        while lo < hi:
            nxt = min(hi, lo + step)
            if await f(nxt) > n:
                hi = nxt - 1
                break
            lo, step = nxt, step * 2
    else:
        hi, step = k - 1, 1
        while hi > lo:
            nxt = max(lo, hi - step)
            if await f(nxt) <= n:
                lo = nxt
                break
            hi, step = nxt - 1, step * 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if await f(mid) <= n:
            lo = mid
        else:
            hi = mid - 1
    return lo


async def fit_units(
    count: AsyncCounter, frame: Frame, n_tokens: int, prefix: str = "", hint: Cut | None = None
) -> tuple[BuiltPrompt, Cut]:
    """`prefix + head + units + tail` cut to exactly `n_tokens` tokens, or the closest
    reachable (exact=False). First on a unit boundary: the largest run of whole units from
    the start, then from up to MAX_STARTS later starts (an excerpt that begins a few lines or
    sentences in). Only when none lands exactly do the last tokens come from the next unit's
    words, and, when a word overshoots, from its characters. `hint` (a cut found for the same
    frame under another prefix of the same length) makes a re-fit cost one count."""
    if n_tokens < 1:
        raise PromptError(f"--prompt-tokens must be >= 1, got {n_tokens}")
    frame = normalized(frame)
    memo: dict[Cut, int] = {}

    async def measure(c: Cut) -> int:
        if c not in memo:
            memo[c] = await count(render(frame, c, prefix))
        return memo[c]

    if hint is not None and await measure(hint) == n_tokens:
        return _built(frame, hint, prefix, n_tokens), hint
    if await measure(Cut(0)) > n_tokens:
        if frame.head or frame.tail:  # too short for the frame: the bare material instead
            bare = Frame("", frame.units, "", frame.unit_kind, frame.strip)
            return await fit_units(count, bare, n_tokens, prefix)
        return BuiltPrompt(
            render(frame, Cut(0), prefix), memo[Cut(0)], False, boundary=frame.unit_kind
        ), Cut(0)
    n_units = len(frame.units)
    # About four characters a token; galloping corrects a poor guess in a few calls.
    budget, guess = 4 * (n_tokens - memo[Cut(0)]), 0
    while guess < n_units and budget > len(frame.units[guess]):
        budget -= len(frame.units[guess])
        guess += 1

    firsts: list[Cut] = []  # per start, the longest run of whole units that fits
    for s in range(min(MAX_STARTS, n_units)):

        async def by_units(k: int, s: int = s) -> int:
            return await measure(Cut(k, start=s))

        if await by_units(s) > n_tokens:
            break
        k = await _largest_at_most(by_units, s, n_units, max(guess, s), n_tokens)
        firsts.append(Cut(k, start=s))
        if memo[firsts[-1]] == n_tokens:
            return _built(frame, firsts[-1], prefix, n_tokens), firsts[-1]
        guess = k + 1
    best = firsts[0]  # Cut(0) fits, so start 0 was tried
    for first in firsts[:MAX_WORD_STARTS]:
        k, s = first.units, first.start
        if k >= n_units:
            continue
        pieces = _PIECES.findall(frame.units[k])

        async def by_words(j: int, k: int = k, s: int = s) -> int:
            return await measure(Cut(k, j, start=s))

        j = await _largest_at_most(by_words, 0, max(0, len(pieces) - 1), 0, n_tokens)
        if memo[Cut(k, j, start=s)] == n_tokens:
            best = Cut(k, j, start=s)
            break
        if s == 0:
            best = Cut(k, j)
    if memo[best] != n_tokens and best.units < n_units:
        k, j = best.units, best.words
        piece = _PIECES.findall(frame.units[k])[j : j + 1] or [""]

        async def by_chars(c: int) -> int:
            return await measure(Cut(k, j, c))

        c = await _largest_at_most(by_chars, 0, max(0, len(piece[0]) - 1), 1, n_tokens)
        best = Cut(k, j, c)
    got = memo[best]
    if got != n_tokens and (frame.head or frame.tail) and n_tokens - memo[Cut(0)] < 8:
        # The frame alone nearly fills the length and no text fits the few tokens left (a
        # word next to the tail's newlines can cost three): the bare material instead.
        bare = Frame("", frame.units, "", frame.unit_kind, frame.strip)
        alt, alt_cut = await fit_units(count, bare, n_tokens, prefix)
        if alt.exact:
            return alt, alt_cut
    return _built(frame, best, prefix, got, exact=got == n_tokens), best


def _built(frame: Frame, cut: Cut, prefix: str, tokens: int, exact: bool = True) -> BuiltPrompt:
    boundary = "char" if cut.chars else "word" if cut.words else frame.unit_kind
    return BuiltPrompt(render(frame, cut, prefix), tokens, exact, boundary=boundary)
