"""The Drafter protocol: what the speculative stepper asks of anything that proposes tokens.

A drafter answers, for every request in the batch at once, with a `Draft` in one of two shapes:

* token sequences (`sequences`, best first): n-gram lookup, or a model's sampled chain;
* per-depth candidate distributions (`topk_tokens` / `topk_logprobs`, shape [L, K]): what DDTree
  needs to build the B most probable prefixes.

A DFlash-style block drafter fits the second shape without changes: its single forward over
[anchor, MASK x (L)] yields L per-position distributions at once; it fills topk_* from those
logits (and `sequences[0]` = per-position argmax for chain verification) and returns. The
protocol never assumes position d was conditioned on the drafted token at d-1, so one-pass
and autoregressive drafters are interchangeable for the stepper. A drafter that keeps per
request state (a KV cache) frees it in `release`, which the backend calls on finish and on
client disconnect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass
class DraftRequest:
    """One request's view for drafting: its committed tokens (prompt + output so far; the last
    one is the anchor the drafts continue) and how many tokens to draft."""

    request_id: str
    tokens: Sequence[int]
    num_draft_tokens: int
    temperature: float = 0.0
    seed: int | None = None


@dataclass
class Draft:
    sequences: list[list[int]] = field(default_factory=list)
    topk_tokens: np.ndarray | None = None  # int64 [L, K], each row sorted by decreasing log-prob
    topk_logprobs: np.ndarray | None = None  # float [L, K]
    # Full draft distribution q_d for each token of sequences[0], float [L, V], only when
    # sequences[0] was *sampled* from q (T > 0): rejection sampling needs q(x) and max(0, p - q).
    # None means the drafts are deterministic (q is one-hot on the drafted token).
    q_probs: np.ndarray | None = None

    @property
    def chain(self) -> list[int]:
        """The single sequence chain verification checks."""
        if self.sequences:
            return list(self.sequences[0])
        if self.topk_tokens is not None and len(self.topk_tokens):
            return [int(t) for t in self.topk_tokens[:, 0]]
        return []


@runtime_checkable
class Drafter(Protocol):
    name: str

    def propose(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        """One Draft per request, in order (an empty Draft when there is nothing to propose)."""
        ...

    def release(self, request_id: str) -> None:
        """Free per-request state. Idempotent."""
        ...


@runtime_checkable
class HiddenStateDrafter(Protocol):
    """A drafter conditioned on the target's hidden states (DFlash): it names the target layers
    it reads, and the stepper hands it the tapped outputs [n, len(taps) * hidden] of every
    position the request commits to the target's KV cache, in order (prefill chunks, then the
    accepted path of each verify). So its context always equals the target's cached context."""

    name: str
    target_taps: tuple[int, ...]

    def propose(self, requests: Sequence[DraftRequest]) -> list[Draft]: ...

    def release(self, request_id: str) -> None: ...

    def observe(
        self,
        request_id: str,
        hidden: Any,
        rows: Sequence[int] | None = None,
        anchor: int | None = None,
    ) -> None:
        """Append the tapped rows `rows` of `hidden` (a verify's accepted path; None: all).
        `anchor`, when given, is the token the request's next propose starts from (the last
        committed one): the drafter may start that propose now."""
        ...


def window(tokens: Sequence[int], draft_window: int | None) -> Sequence[int]:
    """The last `draft_window` tokens (the drafter's whole view); None or <= 0 = unbounded."""
    if draft_window is None or draft_window <= 0 or len(tokens) <= draft_window:
        return tokens
    return tokens[len(tokens) - draft_window :]
