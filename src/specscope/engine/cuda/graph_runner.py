"""The CUDA fast path: decode and tree-verify steps replayed as CUDA graphs per batch bucket.

A step of a model this small is launch-bound (SmolLM2-135M: ~0.06 ms of weight reads against
milliseconds of Python and kernel launches), so the step is made a fixed sequence of kernels:
- inputs live in fixed-capacity device buffers: per batch bucket and node count Q, one int64
  block [bucket, 4Q + 2] (tokens, positions, write slots, mask words, block-table row, context
  length; the layout is `PackedInputs`), filled by ONE host-to-device copy from pinned memory;
  the page tables live in `KVCache.device_table`, updated in place when pages change;
- attention is `paged_attention` (reads the page table in-kernel, so the context length is data,
  not shape);
- the token-wise parts of a layer (RMSNorm, fused QKV projection, RoPE, residuals, fused
  gate/up MLP) are `torch.compile`d functions that take the layer's weights as arguments, so
  one compiled function serves all layers; argmax is inside the graph;
- each (bucket, Q) is captured once as a CUDA graph; a step copies its inputs, replays, and
  synchronises once to read the argmax back;
- with `taps` (a drafter conditioned on the target's hidden states, DFlash), the graph also
  writes the residual stream after each tapped layer into a static [bucket, Q, taps x hidden]
  buffer, so that drafter's verify steps stay on the fast path.
Batches are padded up to the bucket with entries that read block-table row 0 (no context) and
write the pool's scratch slot. Work the graphs do not cover (prefill chunks longer than the node
budget) runs on the eager path, which reads and writes the same pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from specscope.engine.cuda.paged_attention import (
    causal_bits,
    mask_bits,
    num_splits_for,
    paged_attention,
)
from specscope.engine.cuda.prefill import is_fresh, pack_fresh, prefill_fresh, warm_up
from specscope.engine.cuda.tokenwise import TokenwiseLayers
from specscope.engine.kv_cache import KVCache
from specscope.engine.model import Transformer
from specscope.engine.runner import EagerRunner, Logits, Work

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
MAX_GRAPH_NODES = (
    63  # tokens per request in one captured forward (verify budget + root): one int64 mask word
)


def buckets_up_to(max_batch: int) -> list[int]:
    out = [b for b in BUCKETS if b < max_batch]
    return [*out, next((b for b in BUCKETS if b >= max_batch), max_batch)]


@dataclass(frozen=True)
class PackedInputs:
    """Where each input sits in a row of the packed int64 block [bucket, width] for Q nodes per
    request: tokens, positions, KV write slots and mask words (Q each), then the block-table
    row and the context length. One layout for the row that is written (padding, staging) and
    the one the captured step reads."""

    tokens: slice
    positions: slice
    write: slice
    mask: slice
    table_row: int
    context_len: int
    width: int

    @classmethod
    def for_nodes(cls, q: int) -> PackedInputs:
        return cls(
            tokens=slice(0, q),
            positions=slice(q, 2 * q),
            write=slice(2 * q, 3 * q),
            mask=slice(3 * q, 4 * q),
            table_row=4 * q,
            context_len=4 * q + 1,
            width=4 * q + 2,
        )


class CudaGraphRunner:
    """Runner (engine/runner.py) for CUDA: graphs for decode (Q = 1) and verify (Q = node budget)."""

    def __init__(
        self,
        model: Transformer,
        kv: KVCache,
        *,
        max_batch: int,
        max_nodes: int = 1,
        compile: bool = True,
        gemv: bool = True,
        max_context: int | None = None,
        taps: tuple[int, ...] = (),
    ):
        if kv.device.type != "cuda":
            raise ValueError("CudaGraphRunner needs the KV pool on a CUDA device")
        if not self.can_tap(model, taps):
            raise ValueError(
                f"taps {taps}: the captured step can tap layers 0..{len(model.layers) - 2}"
            )
        self.taps = tuple(taps)
        self.model, self.kv, self.device = model, kv, kv.device
        self.eager = EagerRunner(model, kv)
        self.buckets = buckets_up_to(max_batch)
        self.node_counts = sorted({1, max_nodes}) if max_nodes <= MAX_GRAPH_NODES else [1]
        rows = max_context or model.cfg.max_position_embeddings
        if kv.device_table is None:
            # Rows: every running request + the draft pool's own, if it shares this cache.
            kv.enable_device_table(self.buckets[-1] + 1, kv.pages_for(rows + max_nodes) + 1)
        self.table = kv.device_table.table
        self.layers = TokenwiseLayers(model, compile, gemv and compile)
        self._graphs: dict[
            tuple[int, int],
            tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor, torch.Tensor | None],
        ] = {}
        self._pool = torch.cuda.graph_pool_handle()
        self._layout = {q: PackedInputs.for_nodes(q) for q in self.node_counts}
        self._inputs = {
            q: torch.zeros(self.buckets[-1], lo.width, dtype=torch.long, device=self.device)
            for q, lo in self._layout.items()
        }
        self._staging = {
            q: torch.zeros(self.buckets[-1], lo.width, dtype=torch.long).pin_memory()
            for q, lo in self._layout.items()
        }
        self._pad = {q: self._pad_row(q) for q in self.node_counts}
        # Set after each input copy: the pinned staging block is rewritten only once it is done.
        self._copied = {q: torch.cuda.Event() for q in self.node_counts}

    @staticmethod
    def can_tap(model: Transformer, taps: tuple[int, ...]) -> bool:
        """The captured step hands out the residual stream between layers, so it can tap every
        layer but the last (whose output only the final norm and LM head read)."""
        return not taps or max(taps) < len(model.layers) - 1

    # -- the captured function -------------------------------------------------------------
    def _pad_row(self, q: int) -> np.ndarray:
        lo = self._layout[q]
        row = np.zeros(lo.width, dtype=np.int64)
        row[lo.write] = self.kv.pad_slot
        row[lo.mask] = [1 << j for j in range(q)]  # each padding token sees itself only
        return row

    def _step(
        self, inp: torch.Tensor, q: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        b, lo = inp.shape[0], self._layout[q]
        tokens = inp[:, lo.tokens].reshape(-1)
        positions = inp[:, lo.positions].reshape(-1)
        write = inp[:, lo.write].contiguous()
        bits = inp[:, lo.mask].contiguous()
        rows = inp[:, lo.table_row].contiguous()
        lens = inp[:, lo.context_len].contiguous()
        lay, kv = self.layers, self.kv
        splits = num_splits_for(b, lay.kvh)
        x, cos, sin, qh, k, v = lay.first(
            tokens, positions, lay.embed, lay.inv_freq, lay.layers[0][0], lay.layers[0][1]
        )
        n = len(lay.layers)
        tapped: dict[int, torch.Tensor] = {}
        for i, (_, _, wo, ln2, wgu, wd) in enumerate(lay.layers):
            o = paged_attention(
                qh.unflatten(0, (b, q)),
                k.unflatten(0, (b, q)),
                v.unflatten(0, (b, q)),
                kv.k[i],
                kv.v[i],
                self.table,
                rows,
                lens,
                write,
                bits,
                kv.page_size,
                splits,
            )
            if i + 1 < n:
                nxt = lay.layers[i + 1]
                x, qh, k, v = lay.middle(x, o, wo, ln2, wgu, wd, nxt[0], nxt[1], cos, sin)
                if i in self.taps:  # x is now layer i's output (Transformer.forward_taps)
                    tapped[i] = x
            else:
                logits, top = lay.last(x, o, wo, ln2, wgu, wd, lay.final_norm, lay.head)
        hidden = (
            torch.cat([tapped[t] for t in self.taps], dim=-1).view(b, q, -1) if self.taps else None
        )
        return logits.view(b, q, -1), top.view(b, q), hidden

    def _graph(self, bucket: int, q: int):
        key = (bucket, q)
        if key not in self._graphs:
            inp = self._inputs[q][:bucket]
            inp.copy_(torch.from_numpy(np.tile(self._pad[q], (bucket, 1))))
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.inference_mode():
                for _ in range(2):  # compile, autotune and load kernels outside the capture
                    self._step(inp, q)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool), torch.inference_mode():
                logits, top, hidden = self._step(inp, q)
            self._graphs[key] = (graph, logits, top, hidden)
        return self._graphs[key]

    def warmup(self) -> None:
        """Capture every (bucket, node count) now, so no serving step pays a capture."""
        for q in self.node_counts:
            for b in self.buckets:
                self._graph(b, q)
        warm_up(self.layers, self.kv)  # the fresh-prompt prefill's compiled variant, too
        torch.cuda.synchronize()

    # -- Runner -----------------------------------------------------------------------------
    def forward(
        self,
        work: Sequence[Work],
        want_logits: bool = True,
        tokens_on_device: torch.Tensor | None = None,
    ) -> tuple[list[list[int]], Logits | None]:
        replayed = self._replay(work, tokens_on_device)
        if replayed is None:
            if not want_logits and tokens_on_device is None and is_fresh(work):
                slots, batch = pack_fresh(work, self.kv)  # fresh prompts' prefill (prefill.py)
                prefill_fresh(self.layers, self.kv, batch)
                return slots, None
            return self.eager.forward(work, want_logits, tokens_on_device)
        slots, logits, _ = replayed
        return slots, logits

    def forward_hidden(
        self, work: Sequence[Work], taps: tuple[int, ...], want_logits: bool = True
    ) -> tuple[list[list[int]], Logits | None, list[torch.Tensor]]:
        """`forward` plus the tapped layers' outputs per request. The rows are views of the
        graph's static buffer: valid until the next forward (the stepper and prefill read them
        at once)."""
        replayed = self._replay(work) if tuple(taps) == self.taps else None
        if replayed is None:
            return self.eager.forward_hidden(work, taps, want_logits)
        slots, logits, hidden = replayed
        rows = [] if hidden is None else [hidden[r, : len(w.tokens)] for r, w in enumerate(work)]
        return slots, logits, rows

    def _stage(self, work: Sequence[Work], staging: np.ndarray, lo: PackedInputs) -> list:
        """Allocate each request's rows and write its row of the staging block (any Q, masks)."""
        slots = []
        for r, w in enumerate(work):
            n = len(w.tokens)
            ctx = w.seq.context_len
            s = self.kv.alloc_rows(w.seq, n)
            slots.append(s)
            row = staging[r]  # numpy views: row[lo.tokens][:n] writes into the row
            row[lo.tokens][:n] = w.tokens
            row[lo.positions][:n] = w.resolved_positions()
            row[lo.write][:n] = s
            row[lo.mask][:n] = causal_bits(n) if w.mask is None else mask_bits(np.asarray(w.mask))
            row[lo.table_row] = w.seq.table_row
            row[lo.context_len] = ctx
        return slots

    def _stage_decode(self, work: Sequence[Work], staging: np.ndarray, lo: PackedInputs) -> list:
        """`_stage` for a decode step (one token each, Q = 1): whole columns at once instead of
        six small numpy writes per request (the step's per-request Python at batch 256). The
        mask word stays the padding row's (1: the token sees itself), which is what one token's
        causal or tree mask is."""
        b, kv = len(work), self.kv
        ctx = [w.seq.context_len for w in work]
        slots = [kv.alloc_rows(w.seq, 1) for w in work]
        staging[:b, lo.tokens.start] = [w.tokens[0] for w in work]
        staging[:b, lo.positions.start] = [
            c if w.positions is None else w.positions[0] for w, c in zip(work, ctx, strict=True)
        ]
        staging[:b, lo.write.start] = [s[0] for s in slots]
        staging[:b, lo.table_row] = [w.seq.table_row for w in work]
        staging[:b, lo.context_len] = ctx
        return slots

    def _replay(
        self, work: Sequence[Work], tokens_on_device: torch.Tensor | None = None
    ) -> tuple[list[list[int]], Logits, torch.Tensor | None] | None:
        """One captured step over `work`, or None where no graph covers it (eager then).
        `tokens_on_device` overwrites the staged token column after the input copy, on the
        stream, so the step reads the previous step's argmax without a host round trip."""
        q_max = max(len(w.tokens) for w in work)
        q = next((n for n in self.node_counts if n >= q_max), None)
        if q is None or len(work) > self.buckets[-1]:
            return None
        bucket = next(b for b in self.buckets if b >= len(work))
        kv, lo = self.kv, self._layout[q]
        self._copied[q].synchronize()
        staging = self._staging[q].numpy()
        staging[:bucket] = self._pad[q]
        if q == 1 and all(len(w.tokens) == 1 for w in work):
            slots = self._stage_decode(work, staging, lo)
        else:
            slots = self._stage(work, staging, lo)
        # Rows just allocated may have added pages: publish them before the kernel reads.
        kv.sync_device_table([w.seq for w in work])
        graph, logits, top, hidden = self._graph(bucket, q)
        self._inputs[q][:bucket].copy_(self._staging[q][:bucket], non_blocking=True)
        self._copied[q].record()
        b = len(work)
        if tokens_on_device is not None:
            self._inputs[q][:b, lo.tokens.start].copy_(tokens_on_device)
        graph.replay()
        return (
            slots,
            Logits(logits[:b], [len(w.tokens) for w in work], top[:b]),
            None if hidden is None else hidden[:b],
        )
