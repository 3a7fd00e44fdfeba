"""The twin's tokenizer: one token per whitespace-separated word, over a small fixed vocabulary.

Why words: a client that asks /tokenize, or counts words, gets exactly the server's count, so a
probe can build prompts of an exact token length and count streamed tokens without a real
tokenizer. Unknown words map to a vocabulary id by a stable hash (the count stays exact; the text
round-trips only for vocabulary words, which is all the twin ever generates).
"""

from __future__ import annotations

import zlib

import numpy as np

EOS_ID = 0
VOCAB: tuple[str, ...] = (
    "<eos>",
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "on",
    "was",
    "by",
    "this",
    "be",
    "are",
    "from",
    "at",
    "or",
    "an",
    "which",
    "not",
    "we",
    "can",
    "has",
    "model",
    "token",
    "draft",
    "verify",
    "step",
    "tree",
    "cache",
    "page",
    "kernel",
    "batch",
    "decode",
    "prefill",
    "context",
    "window",
    "accept",
    "length",
    "rate",
    "time",
    "server",
    "request",
    "stream",
    "chunk",
    "latency",
    "throughput",
    "memory",
    "attention",
    "layer",
    "value",
    "key",
    "query",
    "head",
    "block",
    "budget",
    "target",
    "drafter",
    "output",
    "input",
    "prompt",
    "sample",
    "greedy",
    "speculative",
    "measure",
    "reason",
    "answer",
    "because",
    "then",
    "so",
    "but",
    "if",
    "when",
    "each",
    "every",
    "more",
    "less",
    "fast",
    "slow",
    "long",
    "short",
    "early",
    "late",
    "first",
    "last",
    "next",
    "one",
    "two",
    "three",
    "many",
    "few",
)
_INDEX = {w: i for i, w in enumerate(VOCAB)}


def tokenize(text: str) -> list[int]:
    ids = []
    for word in text.split():
        i = _INDEX.get(word)
        if i is None or i == EOS_ID:
            i = 1 + zlib.crc32(word.encode("utf-8")) % (len(VOCAB) - 1)
        ids.append(i)
    return ids


def detokenize(ids: list[int]) -> str:
    """Each token renders as " word", so concatenated stream deltas equal the full text."""
    return "".join(" " + VOCAB[i % len(VOCAB)] for i in ids if i != EOS_ID)


def pseudo_text_ids(rng: np.random.Generator, n: int) -> list[int]:
    """n deterministic non-EOS token ids."""
    return [int(x) for x in rng.integers(1, len(VOCAB), size=n)]
