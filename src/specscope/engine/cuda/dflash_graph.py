"""The DFlash drafter's batch-1 step as CUDA graphs: its block forward and its context update.

Eager, that step is launch-bound: a one-layer drafter's block forward is some sixty small
kernels (2.1-2.6 ms on the H200, against a 0.77 ms plain target step) and its context update
0.9-1.1 ms (issue #39's text: `bench/engine_spec.py --device cuda`, 2026-12-02, a two-layer
drafter; its "commit" part then held the update). Both are captured once per context store (`RingContext`, engine/speculative/
dflash_context.py: its buffers never move, so graphs captured over them stay valid while it
lives, and the pool hands a released store to the next request):
- block: the inputs (anchor id, context length) sit in a static int64 device vector set by one
  host-to-device copy; the block attends the store's first `width` rows under a length mask
  (`block_mask`), so the context length is data, not shape. The width is the narrowest of a few
  (`widths`: FIRST_WIDTH, 4x that, ... up to the capacity) that holds the visible rows, one
  graph each: attending the whole capacity (the target's 8,192 positions) cost 129 us a layer
  in cuDNN's attention, 0.26 of the step's 0.46 ms of GPU time, for a 512-row context
  (`bench/dflash_step.py --profile`, H100, 2026-12-06). A ring that has not wrapped holds
  position p at row p, so its visible rows are the first `length`; a wrapped one is read
  whole. All B-1 draft slots go through the LM head over the draft vocabulary (its cost is its
  weights, whatever the rows) and a top-k over the logits less their log-sum-exp
  (dflash_block.top_logprobs), packed as one int64 tensor that the drafter copies to the host
  through one pinned buffer (the step's one sync);
- update: up to B newly committed rows (a verify's accepted path: at most depth + 1 <= B) are
  gathered by their indices from a static copy of the verify's output (`nodes`, filled by
  `stage` with one device copy) and projected as B rows; the first `count` (data) land in the
  ring, the padding rows in the store's scratch row (`ring_rows`). Longer updates (prefill
  chunks) run eagerly (`RingContext.append`) on the same buffers;
- step: the staged update and the block in ONE graph, replayed by the next propose, its inputs
  (anchor, length, start, count, the path's indices) in ONE pinned copy. Apart, the served
  drafting step paid a host-side gather of the path (an index tensor copied up, which waits
  for the device), a buffer copy, two input copies, two replays and two copies back between
  the verify's sync and the block's top-k: 0.41-0.42 ms of drafting a step against 0.30-0.34
  together (H100, the sixth device session, both trees in one call). `flush` replays the
  update alone where something else must read the store first (an eager propose of several
  requests, a prefill chunk).
Graphs cover the first MAX_SLOTS stores (batch-1 serving uses one, reused request after
request); stores past them, there only while more requests run at once, stay eager: a capture
costs a sync and milliseconds in the middle of serving, and those requests' proposes are
batched, eager, anyway.
Warm-up runs each function twice on a side stream (kernels loaded, algorithms picked) with the
step's real inputs (an update writes the same rows again: idempotent; a step captured before
any update writes none), then captures it into a
pool shared by all of this drafter's graphs, as engine/cuda/graph_runner.py does.

`compile=True` (`EngineOptions.torch_compile`, the engine's default on CUDA) fuses each
function with torch.compile before warm-up and capture: unfused, a 2-layer block-16 drafter's
graphs replay 176 kernels a propose and 73 an update in bf16 (`bench/dflash_step.py
--count-ops`), launch-bound at ~1.1 ms a step on the H100 (2026-12-05) against microseconds
of work.
`capture=False` runs exactly these functions on the same static buffers without capturing:
what the CPU tests check (tests/test_engine_dflash_static.py), and the reference side of
`bench/dflash_step.py --check`. Not verified without a GPU: the capture itself and the replayed
drafts matching the eager ones; `bench/dflash_step.py --device cuda --check` does both.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from specscope.engine.cuda.tokenwise import allow_variants
from specscope.engine.model import Transformer
from specscope.engine.speculative.dflash_block import (
    block_mask,
    block_topk,
    pack_topk,
)
from specscope.engine.speculative.dflash_context import RingContext, project
from specscope.engine.speculative.dflash_model import DFlashDraftModel
from specscope.engine.speculative.draft_vocab import DraftHead

MAX_SLOTS = 8
FIRST_WIDTH = 512  # the narrowest context a block attends; each next width is 4x, to the capacity


def widths(capacity: int) -> list[int]:
    """The context widths a block is captured at, narrowest first: FIRST_WIDTH x 4^i below
    the capacity, then the capacity (few: each is a compilation and a graph per store)."""
    out, width = [], FIRST_WIDTH
    while width < capacity:
        out.append(width)
        width *= 4
    return [*out, capacity]


def width_for(ctx: RingContext) -> int:
    """The narrowest width that holds `ctx`'s visible rows."""
    visible = min(ctx.length, ctx.capacity)
    return next(w for w in widths(ctx.capacity) if w >= visible)


class _DeviceInts:
    """A small int64 vector the step reads, set from the host by one copy (on CUDA from pinned
    memory, whose staging is rewritten only once the previous copy is done). The stream is
    looked up once: `torch.cuda.current_stream()` at every record was a visible part of the
    served step's host time (the sixth device session's profile)."""

    def __init__(self, n: int, device: torch.device):
        cuda = device.type == "cuda"
        self.dev = torch.zeros(n, dtype=torch.long, device=device)
        self.host = torch.zeros(n, dtype=torch.long, pin_memory=cuda)
        self.stream = torch.cuda.current_stream(device) if cuda else None
        self.copied = torch.cuda.Event() if cuda else None

    def set(self, values: Sequence[int]) -> None:
        """Write the first len(values) entries (the rest keep what they held)."""
        if self.copied is not None:
            self.copied.synchronize()
        self.host.numpy()[: len(values)] = values
        self.dev.copy_(self.host, non_blocking=True)
        if self.copied is not None:
            self.copied.record(self.stream)


class _HostCopy:
    """The step's packed top-k brought to the host: one pinned buffer (made at the first
    copy), one copy, one wait. `start` queues the copy, `wait` reads it: the array is this
    buffer, so read it before the next copy."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.current_stream(device) if self.cuda else None
        self.ready = torch.cuda.Event() if self.cuda else None
        self.host: torch.Tensor | None = None

    def start(self, out: torch.Tensor) -> None:
        if not self.cuda:
            self.host = out
            return
        if self.host is None or self.host.shape != out.shape:
            self.host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
        self.host.copy_(out, non_blocking=True)
        assert self.ready is not None
        self.ready.record(self.stream)

    def wait(self) -> np.ndarray:
        if self.ready is not None:
            self.ready.synchronize()
        assert self.host is not None
        return self.host.numpy()


class DFlashGraphs:
    def __init__(
        self,
        model: DFlashDraftModel,
        target: Transformer,
        head: DraftHead,
        top_k: int,
        capture: bool,
        compile: bool = False,
        attention: str = "sdpa",
        verify_rows: int = 0,
    ):
        dev = model.fc.weight.device
        if capture and dev.type != "cuda":
            raise ValueError("DFlash graphs: capturing needs the drafter on a CUDA device")
        self.model, self.target, self.head, self.top_k = model, target, head, top_k
        self.attention = attention
        self.block_size = b = model.config.block_size
        # The verify output's rows a staged update may come from (the tree's nodes)
        self.verify_rows = max(verify_rows, b)
        self.capturing = capture
        with torch.inference_mode():
            # anchor id, context length, first new position, new rows, their indices in `nodes`
            self.inputs = _DeviceInts(4 + b, dev)
            self.nodes = model.fc.weight.new_zeros(self.verify_rows, model.fc.in_features)
        self.host = _HostCopy(dev)
        # The store whose new rows are staged (the verify's rows in `nodes`), where they start,
        # and which rows of `nodes` they are: one at a time (one buffer).
        self.staged: tuple[RingContext, int, list[int]] | None = None
        # The store, anchor and context length of a step launched ahead of its propose (`stage`
        # with an anchor), its top-k on its way to the host: one at a time (the replayed
        # graphs' outputs share one pool, so any later replay voids it).
        self.launched: tuple[RingContext, int, int] | None = None
        self._graphs: dict[tuple[int, str, int], tuple[Any, Any]] = {}
        self._pool = torch.cuda.graph_pool_handle() if capture else None
        # What a graph captures: the two step functions, fused by torch.compile when asked (the
        # module docstring: unfused, a replay is one small kernel per op); compiled once, for
        # every store of the pool.
        fuse = partial(torch.compile, fullgraph=True, dynamic=False) if compile else (lambda f: f)
        if compile:
            allow_variants()  # one compiled block per width
        self._steps = {"step": fuse(self._step), "update": fuse(self._update)}

    @staticmethod
    def covers(ctx: object) -> bool:
        return isinstance(ctx, RingContext) and ctx.slot < MAX_SLOTS

    def stages(self, hidden: torch.Tensor, new_rows: int) -> bool:
        """Whether an update of `new_rows` rows out of `hidden` can be staged."""
        return new_rows <= self.block_size and hidden.shape[0] <= self.verify_rows

    def stage(
        self,
        ctx: RingContext,
        hidden: torch.Tensor,
        rows: Sequence[int] | None,
        anchor: int | None = None,
    ) -> None:
        """Take 1..B committed rows of tapped target features (`hidden` [n, taps x D], its
        `rows`, e.g. a verify's accepted path; None: all) for `ctx` (`stages` says whether they
        fit); the next `propose` on it gathers and writes them in the same replay as the block
        (`flush` writes them alone). `hidden` is copied now, whole (the verify's output is
        valid until the next forward): one device copy, no sync. With `anchor` (the token the
        next propose will start from) that step is launched now: the device drafts while the
        host finishes the verify's bookkeeping, and the propose only waits for the copy back."""
        self.flush()
        self.nodes[: hidden.shape[0]].copy_(hidden)
        rows = list(range(hidden.shape[0]) if rows is None else rows)
        self.staged = (ctx, ctx.length, rows)
        ctx.length += len(rows)
        if anchor is not None:
            self.host.start(self._replay_step(ctx, anchor))
            self.launched = (ctx, anchor, ctx.length)

    def flush(self) -> None:
        """Write the staged rows into their store now (before anything else reads it)."""
        if self.staged is not None:
            (ctx, start, rows), self.staged = self.staged, None
            self.inputs.set([0, 0, start, len(rows), *rows])
            self._run(ctx, "update", 0)

    def propose(self, ctx: RingContext, anchor: int) -> np.ndarray:
        """The block after `anchor`, its store's staged rows written first in the same replay
        (or the step launched by `stage` for this store, anchor and length): [B-1, 2k] int64
        on the host, the top-k ids then their log-probs' float32 bits
        (dflash_block.pack_topk)."""
        launched, self.launched = self.launched, None
        if launched is None or launched != (ctx, anchor, ctx.length):
            self.host.start(self._replay_step(ctx, anchor))
        return self.host.wait()

    def release(self, ctx: RingContext) -> None:
        """`ctx` goes back to the pool: its staged rows are not written, its launched step is
        not read."""
        if self.staged is not None and self.staged[0] is ctx:
            self.staged = None
        if self.launched is not None and self.launched[0] is ctx:
            self.launched = None

    def _replay_step(self, ctx: RingContext, anchor: int) -> torch.Tensor:
        """One step on `ctx` from `anchor`: its staged rows (if any) written, then the block."""
        if self.staged is not None and self.staged[0] is ctx:
            (_, start, rows), self.staged = self.staged, None
        else:
            self.flush()
            start, rows = ctx.length, []  # nothing staged: the update writes no row
        self.inputs.set([anchor, ctx.length, start, len(rows), *rows])
        return self._run(ctx, "step", width_for(ctx))

    def capture(self, ctx: RingContext) -> None:
        """Capture the graphs over `ctx` now (with the current inputs: an update of 0 rows
        before the first one; the step at every width) instead of at its first step."""
        if self.capturing:
            self._graph(ctx, "update", 0)
            for width in widths(ctx.capacity):
                self._graph(ctx, "step", width)
            torch.cuda.synchronize()

    def _block(self, ctx: RingContext, width: int) -> torch.Tensor:
        """The block's packed top-k over the store's first `width` rows (width >= the visible
        rows)."""
        c, inp = width, self.inputs.dev
        kv = [(k[None, :c], v[None, :c]) for k, v in zip(ctx.keys, ctx.values, strict=True)]
        mask = block_mask(inp[1:2].clamp(max=c), c, self.block_size)
        top_lp, top_ids = block_topk(
            self.model,
            self.target,
            self.head,
            kv,
            inp[0:1],
            inp[1:2],
            mask,
            self.block_size - 1,
            self.top_k,
            self.attention,
        )
        return pack_topk(top_lp[0], top_ids[0])

    def _update(self, ctx: RingContext, _width: int) -> None:
        """The staged rows gathered from `nodes` by their indices, projected and written (the
        first `count` of B; the rest land in the scratch row)."""
        inp = self.inputs.dev
        start, count = inp[2], inp[3]
        hidden = self.nodes.index_select(0, inp[4 : 4 + self.block_size])
        ctx.write(project(self.model, hidden, start), start, count)

    def _step(self, ctx: RingContext, width: int) -> torch.Tensor:
        """The staged rows written (none when the count is 0: all go to the scratch row), then
        the block over the updated store: one replay a speculative step."""
        self._update(ctx, 0)
        return self._block(ctx, width)

    def _run(self, ctx: RingContext, kind: str, width: int) -> Any:
        self.launched = None  # any replay may reuse the launched step's outputs (one pool)
        if not self.capturing:
            return self._steps[kind](ctx, width)
        graph, out = self._graph(ctx, kind, width)
        graph.replay()
        return out

    def _graph(self, ctx: RingContext, kind: str, width: int) -> tuple[Any, Any]:
        key = (ctx.slot, kind, width)
        if key not in self._graphs:
            step = partial(self._steps[kind], ctx, width)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):  # load kernels and pick algorithms outside the capture
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                out = step()
            self._graphs[key] = (graph, out)
        return self._graphs[key]
