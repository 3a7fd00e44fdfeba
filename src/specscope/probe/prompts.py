"""Prompts of an exact token length, counted by the server's own tokenizer when it has one.

Why the server's: a prompt of "2048 tokens" must be 2048 in the tokenizer that prefills it, or
context-dependent step times are attributed to the wrong context. Tokenize endpoints:
vLLM/SGLang `POST /tokenize {"prompt": s}` -> `{"tokens": [...], "count": n}`; llama.cpp
`POST /tokenize {"content": s}` -> `{"tokens": [...]}`. Without one, a local `tokenizer.json`
(`--tokenizer`, read with the `tokenizers` library) is used, else a clear error.

The text is deterministic filler words; with `vary=True` each request index gets its own word
sequence so that a prefix cache cannot turn repeated requests into cache hits.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

AsyncCounter = Callable[[str], Awaitable[int]]

# Common words that are one token in most BPE vocabularies (with a leading space).
_WORDS = ["the", "river", "light", "water", "stone", "green", "house", "world", "river", "people", "table", "window", "garden", "city", "music", "paper", "story", "night", "morning", "letter", "mountain", "forest", "bridge", "market", "school", "summer", "winter", "doctor", "friend", "mother", "father", "village", "station", "engine", "simple", "number", "little", "second", "village", "yellow", "silver", "corner", "garden", "season", "animal", "ocean", "island", "valley", "field", "circle", "answer", "moment", "country", "family", "history", "picture", "minute", "single", "follow", "open", "begin", "carry", "change"]
_SHORT = ("a", "I", "the", "to", "of", "and", "in", "it", "is", "on", "at", "by")
_MAX_CALLS = 40


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
        raise TokenizeError(f"{where} counted {n} tokens for {len(text)} characters of text: "
                            "impossible, so no prompt length can be trusted")
    return n


@dataclass
class BuiltPrompt:
    text: str
    tokens: int  # as counted; equals the target unless `exact` is False
    exact: bool


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

    def count(text: str, *, special: bool = True) -> int:
        return len(tok.encode(text, add_special_tokens=special).ids)

    return count


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


async def server_counter(session: aiohttp.ClientSession, base_url: str,
                         endpoints: tuple[tuple[str, str], ...], timeout_s: float = 10.0
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


def _words(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(_WORDS) for _ in range(n)]


async def build_prompt(count: AsyncCounter, n_tokens: int, seed: int = 0) -> BuiltPrompt:
    """Filler text of exactly `n_tokens` tokens, or the closest reachable (exact=False).

    Token count grows (almost) by one per filler word, so a secant search on the word count
    lands in a few calls; a last word that jumps over the target is swapped for shorter ones.
    """
    if n_tokens < 1:
        raise PromptError(f"--prompt-tokens must be >= 1, got {n_tokens}")
    words = _words(seed, 2 * n_tokens + 16)
    calls = 0

    async def c(ws: list[str]) -> int:
        nonlocal calls
        calls += 1
        return await count(" ".join(ws))

    w = min(len(words), max(1, n_tokens))
    got = await c(words[:w])
    best = (abs(got - n_tokens), w, got)
    lo: tuple[int, int] | None = None  # (words, tokens) with tokens < target
    hi: tuple[int, int] | None = None  # (words, tokens) with tokens > target
    while got != n_tokens and calls < _MAX_CALLS // 2:
        if got < n_tokens:
            lo = (w, got)
        else:
            hi = (w, got)
        if lo and hi:
            if hi[0] - lo[0] <= 1:
                break  # one word jumps over the target: fixed below
            guess = lo[0] + round((n_tokens - lo[1]) * (hi[0] - lo[0]) / (hi[1] - lo[1]))
            w = min(max(guess, lo[0] + 1), hi[0] - 1)
        elif lo:
            if lo[0] >= len(words):
                break
            per_word = max(lo[1] / lo[0], 0.25)
            w = min(len(words), lo[0] + max(1, round((n_tokens - lo[1]) / per_word)))
        else:
            assert hi is not None
            if hi[0] <= 1:
                break
            per_word = max(hi[1] / hi[0], 0.25)
            w = max(1, hi[0] - max(1, round((hi[1] - n_tokens) / per_word)))
        got = await c(words[:w])
        best = min(best, (abs(got - n_tokens), w, got))
    _, w, got = best
    text_words = words[:w]
    if got != n_tokens:
        # Jumped over the target by a multi-token word: try other last words.
        for cand_w in (w, w - 1, w + 1):
            if cand_w < 1 or calls >= _MAX_CALLS:
                continue
            for alt in _SHORT:
                if calls >= _MAX_CALLS:
                    break
                trial = [*words[: cand_w - 1], alt]
                n = await c(trial)
                if abs(n - n_tokens) < abs(got - n_tokens):
                    got, text_words = n, trial
                if got == n_tokens:
                    break
            if got == n_tokens:
                break
    return BuiltPrompt(text=" ".join(text_words), tokens=got, exact=got == n_tokens)


async def build_prompts(count: AsyncCounter, n_tokens: int, n: int, vary: bool = True
                        ) -> list[BuiltPrompt]:
    """`n` prompts (one per request); identical when `vary` is False (built once)."""
    if not vary:
        one = await build_prompt(count, n_tokens, seed=0)
        return [one] * n
    return [await build_prompt(count, n_tokens, seed=i) for i in range(n)]


def local_async(counter: Callable[[str], int]) -> AsyncCounter:
    async def count(text: str) -> int:
        return counter(text)

    return count
