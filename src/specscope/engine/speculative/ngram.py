"""Prompt-lookup drafting: continue the request's own text where its recent n-gram occurred before.

Free to run (no model), and strong on code, edits and anything that repeats its input — the
case where speculation can win even on a CPU. Longer n-grams are tried first because a longer
match predicts its continuation more reliably; each distinct continuation becomes a candidate
(most recent match first), so `tree` verification can check several at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specscope.engine.speculative.drafter import Draft, DraftRequest, window


@dataclass
class NgramDrafter:
    min_ngram: int = 1
    max_ngram: int = 4
    num_candidates: int = 1
    draft_window: int | None = None
    name: str = "ngram"

    def __post_init__(self) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(
                f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}"
            )
        if self.num_candidates < 1:
            raise ValueError("num_candidates must be >= 1")

    def propose(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        return [Draft(sequences=self.lookup(r.tokens, r.num_draft_tokens)) for r in requests]

    def release(self, request_id: str) -> None:  # stateless
        return None

    def lookup(self, tokens: Sequence[int], k: int) -> list[list[int]]:
        """Up to num_candidates distinct continuations of length <= k, best first."""
        seq = np.asarray(window(tokens, self.draft_window), dtype=np.int64)
        n_tok = len(seq)
        found: list[list[int]] = []
        if k <= 0:
            return found
        for n in range(min(self.max_ngram, n_tok - 1), self.min_ngram - 1, -1):
            suffix = seq[n_tok - n :]
            # Start indices i of every earlier occurrence seq[i:i+n] == suffix whose
            # continuation starts inside the sequence (i + n < n_tok), most recent first.
            windows = np.lib.stride_tricks.sliding_window_view(seq[: n_tok - 1], n)
            starts = np.flatnonzero((windows == suffix).all(axis=1))[::-1]
            for i in starts:
                cont = seq[i + n : i + n + k].tolist()
                if cont and cont not in found:
                    found.append(cont)
                    if len(found) >= self.num_candidates:
                        return found
        return found
