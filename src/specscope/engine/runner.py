"""Target forwards over the paged KV cache: the narrow interface steppers (plain, speculative)
and prefill use, and its eager implementation (CPU, and the GPU's fallback for big prefills).

`forward(work)` runs each request's new tokens at explicit positions (causal, or under a tree
mask) against its committed context, writes their K/V into freshly allocated rows, and returns
those rows' slots and the logits; it commits nothing: the caller commits what it accepts.
The CUDA fast path (engine/cuda/graph_runner.py) has the same interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from specscope.engine.kv_cache import KVCache, SeqKV
from specscope.engine.model import ForwardBatch, NewTokens, Transformer


@dataclass
class Work:
    """One request's new tokens for a forward."""

    seq: SeqKV
    tokens: list[int]
    positions: list[int] | None = None  # None: consecutive from the context length
    mask: np.ndarray | None = (
        None  # bool [q, q]: new j sees new i (diagonal implied); None = causal
    )

    def resolved_positions(self) -> list[int]:
        if self.positions is not None:
            return self.positions
        start = self.seq.context_len
        return list(range(start, start + len(self.tokens)))


class Logits:
    """A forward's logits: the float32 tensor [B, Q, vocab] on the device, and per request the
    argmax of each of its q rows on the host (what greedy decoding and verification need)."""

    def __init__(
        self, tensor: torch.Tensor, num_new: Sequence[int], argmax: torch.Tensor | None = None
    ):
        self.tensor = tensor
        self.num_new = list(num_new)
        self._argmax_dev = argmax
        self._argmax: list[list[int]] | None = None

    def argmax_device(self) -> torch.Tensor:
        """The argmax rows [B, Q] on the device, nothing read back (an overlapped step feeds
        them to the next forward before the host has seen them)."""
        if self._argmax_dev is None:
            self._argmax_dev = self.tensor.argmax(dim=-1)
        return self._argmax_dev

    def argmax(self) -> list[list[int]]:
        if self._argmax is None:
            rows = self.argmax_device().tolist()  # the step's one device->host synchronisation
            self._argmax = [row[:q] for row, q in zip(rows, self.num_new, strict=False)]
        return self._argmax


class Runner(Protocol):
    kv: KVCache
    device: torch.device

    def forward(
        self,
        work: Sequence[Work],
        want_logits: bool = True,
        tokens_on_device: torch.Tensor | None = None,
    ) -> tuple[list[list[int]], Logits | None]:
        """Write the new tokens' K/V into new rows and return (their slots per request, logits).
        `tokens_on_device` (long [B], one token per request): the tokens this forward feeds,
        already on the device (an overlapped decode step: the previous step's argmax); the
        work's own tokens are then placeholders."""
        ...

    def forward_hidden(
        self, work: Sequence[Work], taps: tuple[int, ...], want_logits: bool = True
    ) -> tuple[list[list[int]], Logits | None, list[torch.Tensor]]:
        """`forward`, plus each request's tapped layer outputs [q_r, len(taps) * hidden]
        (what a drafter conditioned on the target's hidden states reads)."""
        ...


def extend(runner: Runner, work: Sequence[Work], want_logits: bool = True) -> Logits | None:
    """Forward and commit every new token (prefill chunks, plain decode)."""
    _, logits = runner.forward(work, want_logits)
    for w in work:
        runner.kv.commit(w.seq, len(w.tokens))
    return logits


class EagerRunner:
    """`Transformer.forward` on a packed batch: context gathered by slot, SDPA attention."""

    def __init__(self, model: Transformer, kv: KVCache):
        self.model, self.kv = model, kv
        self.device = kv.device

    def forward(
        self,
        work: Sequence[Work],
        want_logits: bool = True,
        tokens_on_device: torch.Tensor | None = None,
    ) -> tuple[list[list[int]], Logits | None]:
        slots, logits, _ = self.forward_hidden(work, (), want_logits, tokens_on_device)
        return slots, logits

    def forward_hidden(
        self,
        work: Sequence[Work],
        taps: tuple[int, ...],
        want_logits: bool = True,
        tokens_on_device: torch.Tensor | None = None,
    ) -> tuple[list[list[int]], Logits | None, list[torch.Tensor]]:
        """`forward`, plus each request's tapped hidden states [q_r, len(taps) * hidden]
        (`Transformer.forward_taps`)."""
        items, slots = [], []
        for w in work:  # host data only: `pack` moves the batch to the device in one copy
            context = self.kv.context_slots(w.seq)
            s = self.kv.alloc_rows(w.seq, len(w.tokens))
            slots.append(s)
            items.append(NewTokens(w.tokens, w.resolved_positions(), s, context, w.mask))
        batch = ForwardBatch.pack(items, self.device, self.kv.pad_slot)
        if tokens_on_device is not None:
            batch.token_ids[:, 0].copy_(tokens_on_device)  # one token per request (decode)
        out, hidden = self.model.forward_taps(batch, self.kv, taps, compute_logits=want_logits)
        rows = [] if hidden is None else [hidden[r, :q] for r, q in enumerate(batch.num_new)]
        return slots, (None if out is None else Logits(out, batch.num_new)), rows
