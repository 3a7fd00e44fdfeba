"""The DFlash drafter's per-request context store: each draft layer's keys/values of the
projected target features of every committed position the drafter may attend to.

`RingContext` (the store the drafter runs on) preallocates, per layer, [capacity + 1, kv_heads,
head_dim] for keys and for values and writes position p's row at p % capacity in place
(index_copy_), so neither a context update nor a block forward allocates per step, and shapes
are static for a given capacity: what a CUDA graph needs (engine/cuda/dflash_graph.py).
capacity = the draft window, so the ring holds exactly the last `draft_window` positions (what
the window shows; an older row is overwritten the step it falls out), or, with no window, the
target's maximum context (a request can never outgrow it, so nothing is ever dropped). Attention
does not care about row order (keys carry their RoPE position), so rows 0..min(length,
capacity)-1 are the visible context whether or not the ring has wrapped. Row `capacity` is a
scratch row: writes that must not land (a padded update's padding rows) go there, and it is
never attended.

`GrowingContext` is the store the drafter had before: torch.cat per update, rows beyond twice
the window dropped. It is kept as the reference the ring is tested against
(tests/test_engine_dflash_static.py) and timed against (bench/dflash_step.py).

`ContextPool` maps request ids to stores; a released store goes back to a free list and the next
request reuses it (for a ring: the same buffers, so graphs captured over them stay valid).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from specscope.engine.speculative.dflash_model import DFlashDraftModel

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values) [rows, kv_heads, head_dim]


def project(model: DFlashDraftModel, hidden: torch.Tensor, start: int | torch.Tensor) -> KV:
    """Each layer's keys/values [n, kv_heads, head_dim] of tapped target rows hidden
    [n, taps * D] at positions start..start+n-1 (start: an int, or a 0-dim tensor in a graph)."""
    positions = start + torch.arange(hidden.shape[0], device=hidden.device)
    kvs = model.context_kv(model.fuse(hidden[None]), positions[None])
    return [(k[0], v[0]) for k, v in kvs]


def ring_rows(
    start: int | torch.Tensor, count: int | torch.Tensor, n: int, capacity: int, device
) -> torch.Tensor:
    """Store rows for n new rows at positions start.. of which the first `count` are real:
    a real row among the last `capacity` of them goes to position % capacity; padding rows and
    real rows that a later row of the same write overwrites go to the scratch row `capacity`
    (so no two rows of one write share a ring row)."""
    j = torch.arange(n, device=device)
    keep = (j < count) & (j >= count - capacity)
    return torch.where(keep, (start + j) % capacity, capacity)


class Context(Protocol):
    length: int  # context positions observed (absolute)

    def append(self, model: DFlashDraftModel, hidden: torch.Tensor) -> None: ...

    def rows(self) -> KV: ...

    def reset(self) -> None: ...


class RingContext:
    def __init__(self, model: DFlashDraftModel, capacity: int, slot: int):
        c = model.config
        param = model.fc.weight
        shape = (capacity + 1, c.num_kv_heads, c.head_dim)
        self.keys = [param.new_zeros(shape) for _ in model.layers]
        self.values = [param.new_zeros(shape) for _ in model.layers]
        self.capacity, self.slot = capacity, slot
        self.length = 0

    @property
    def visible(self) -> int:
        return min(self.length, self.capacity)

    def rows(self) -> KV:
        """The visible rows (ring order), as views: no copy."""
        n = self.visible
        return [(k[:n], v[:n]) for k, v in zip(self.keys, self.values, strict=True)]

    def write(self, kvs: KV, start: int | torch.Tensor, count: int | torch.Tensor) -> None:
        """Write projected rows (the first `count` real) at positions start.. in place; does
        not move `length` (the caller does: in a graph the count is data)."""
        idx = ring_rows(start, count, kvs[0][0].shape[0], self.capacity, kvs[0][0].device)
        for (k, v), keys, values in zip(kvs, self.keys, self.values, strict=True):
            keys.index_copy_(0, idx, k)
            values.index_copy_(0, idx, v)

    def append(self, model: DFlashDraftModel, hidden: torch.Tensor) -> None:
        """Eager update with any number of rows: only the last `capacity` are projected."""
        n = hidden.shape[0]
        m = min(n, self.capacity)
        start = self.length + n - m
        self.write(project(model, hidden[n - m :], start), start, m)
        self.length += n

    def reset(self) -> None:
        self.length = 0  # stale rows sit beyond `visible` until overwritten


class GrowingContext:
    def __init__(self, window: int | None):
        self.window = window
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.length = 0

    def append(self, model: DFlashDraftModel, hidden: torch.Tensor) -> None:
        kvs = project(model, hidden, self.length)
        if self.keys:
            kvs = [
                (torch.cat([pk, k]), torch.cat([pv, v]))
                for (k, v), pk, pv in zip(kvs, self.keys, self.values, strict=True)
            ]
        if self.window is not None and kvs[0][0].shape[0] > 2 * self.window:
            kvs = [(k[-self.window :], v[-self.window :]) for k, v in kvs]  # never shown again
        self.keys, self.values = [k for k, _ in kvs], [v for _, v in kvs]
        self.length += hidden.shape[0]

    def rows(self) -> KV:
        held = self.keys[0].shape[0] if self.keys else 0
        n = held if self.window is None else min(held, self.window)
        return [(k[held - n :], v[held - n :]) for k, v in zip(self.keys, self.values, strict=True)]

    def reset(self) -> None:
        self.keys, self.values, self.length = [], [], 0


class ContextPool:
    """Request id -> store. `make(slot)` builds a store; released stores are reset and handed
    to later requests instead of being rebuilt (slot = the store's index, stable for its life)."""

    def __init__(self, make: Callable[[int], Context]):
        self._make = make
        self._live: dict[str, Context] = {}
        self._free: list[Context] = []
        self._slots = 0

    def get(self, request_id: str) -> Context:
        ctx = self._live.get(request_id)
        if ctx is None:
            ctx = self._live[request_id] = self._free.pop() if self._free else self._new()
        return ctx

    def spare(self) -> Context:
        """A free store (built if there is none), left on the free list: for warming up."""
        if not self._free:
            self._free.append(self._new())
        return self._free[-1]

    def release(self, request_id: str) -> Context | None:
        """Reset the request's store and put it on the free list; returns it (None: none)."""
        ctx = self._live.pop(request_id, None)
        if ctx is not None:
            ctx.reset()
            self._free.append(ctx)
        return ctx

    def __len__(self) -> int:
        return len(self._live)

    def _new(self) -> Context:
        self._slots += 1
        return self._make(self._slots - 1)
