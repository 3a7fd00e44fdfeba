"""Paged KV cache: one fixed pool of pages, a page table per request, two allocation policies.

The pool holds `num_pages * page_size` token slots per layer (`k[layer]`, `v[layer]`:
[slots + 1, kv_heads, head_dim]; the extra last slot is a scratch target for padded writes).
A request's rows 0, 1, 2, ... map to slot `pages[row // page_size] * page_size + row % page_size`.

Policies (the story's question is whether the second one slows attention down):
- `contiguous`: a request's next page is the one right after its last page when free, else the
  lowest free page — a lone request gets one adjacent run of slots;
- `scattered`: the next page is drawn at random from the free list — fragmentation on purpose.
Both hand out a page in O(1) / O(log pages), never a scan of the free pages: the free list is a
swap-remove array with an index (a random pick, a named take), and the lowest free page comes
off a min-heap whose stale entries (pages taken by another path) are dropped as they surface;
at batch 256 a scan per new page was milliseconds of the engine thread's step (§7.1).

Admission control instead of mid-generation failure: `admit` reserves the pages a request can
ever need (prompt + max_tokens + speculation headroom) and raises `BackendError` (503) when the
pool cannot promise them, so a running request never runs out and never touches another's pages.

For speculation a request's KV is "committed context" (rows 0..context_len-1, visible to every
later token) plus "pending rows" handed out by `alloc_slots`: verify k tokens in pending rows,
then `move_rows` the accepted ones to the front (compaction) or `reorder_rows` the page table
over them (page size 1), `commit` them, and `truncate` to give back the rows past the context.
So the committed context is always rows 0..context_len-1 of the page table, in position order.

The page table has a device mirror (`DeviceBlockTable`) when a fixed-shape attention kernel
reads it (the CUDA fast path): every change to a request's pages marks where its row became
stale, and `sync_device_table` writes only those entries before the next forward.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from specscope.backend import BackendError
from specscope.engine.model import host_to_device

POLICIES = ("contiguous", "scattered")


@dataclass
class SeqKV:
    """One request's view of the pool."""

    request_id: str
    reserved_pages: int
    pages: list[int] = field(default_factory=list)
    num_rows: int = 0  # rows handed out by alloc_slots (committed or pending)
    context_len: int = 0  # committed rows (0..context_len-1), visible to later tokens
    table_row: int = 0  # this request's row of the device block table (0: none)
    table_synced: int = 0  # leading entries of `pages` the device table holds correctly


class KVCache:
    @classmethod
    def for_model(
        cls,
        cfg: Any,
        *,
        pool_tokens: int,
        page_size: int,
        policy: str = "contiguous",
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> KVCache:
        """A pool of at least `pool_tokens` rows shaped for a model config (layers, KV heads,
        head dim): the one place that sizes a cache from a model."""
        return cls(
            num_layers=cfg.num_layers,
            num_kv_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim,
            num_pages=max(1, -(-pool_tokens // page_size)),
            page_size=page_size,
            policy=policy,
            dtype=dtype,
            device=device,
            seed=seed,
        )

    def __init__(
        self,
        *,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        num_pages: int,
        page_size: int,
        policy: str = "contiguous",
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ):
        if policy not in POLICIES:
            raise ValueError(f"kv allocation policy must be one of {POLICIES}, got {policy!r}")
        if page_size < 1 or num_pages < 1:
            raise ValueError("page_size and num_pages must be >= 1")
        self.page_size, self.num_pages, self.policy = page_size, num_pages, policy
        self.device = torch.device(device)
        slots = num_pages * page_size
        self.pad_slot = slots  # scratch slot: padded writes land here, padded reads are masked
        # Zeros, not empty: masked-out reads must still be finite (0 * NaN would poison softmax).
        shape = (num_layers, slots + 1, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=dtype, device=self.device)
        self._free: list[int] = list(range(num_pages))
        self._where: dict[int, int] = {p: i for i, p in enumerate(self._free)}
        # Contiguous policy: every free page has at least one entry here (a sorted list is a
        # heap); entries of pages taken since are stale and skipped when they reach the top.
        self._lowest: list[int] = list(range(num_pages)) if policy == "contiguous" else []
        self._rng = random.Random(seed)
        self.seqs: dict[str, SeqKV] = {}
        self.device_table: DeviceBlockTable | None = None

    # -- accounting -------------------------------------------------------------------------
    @property
    def free_pages(self) -> int:
        return len(self._free)

    def _outstanding(self) -> int:
        """Pages promised to admitted requests but not yet taken from the free list."""
        return sum(max(0, s.reserved_pages - len(s.pages)) for s in self.seqs.values())

    def pages_for(self, rows: int) -> int:
        return math.ceil(rows / self.page_size)

    def admit(self, request_id: str, max_rows: int) -> SeqKV:
        """Reserve room for `max_rows` rows or raise BackendError(503) without side effects."""
        if request_id in self.seqs:
            raise BackendError(f"request {request_id!r} already holds KV pages", 409)
        need = self.pages_for(max_rows)
        available = self.free_pages - self._outstanding()
        if need > available:
            raise BackendError(
                f"KV pool exhausted: request needs {need} pages of {self.page_size} tokens, "
                f"{available} of {self.num_pages} are unpromised; retry later",
                503,
            )
        seq = SeqKV(request_id, need)
        if self.device_table is not None:
            seq.table_row = self.device_table.take_row()
        self.seqs[request_id] = seq
        return seq

    def release(self, request_id: str) -> None:
        """Return the request's pages to the free list. Idempotent."""
        seq = self.seqs.pop(request_id, None)
        if seq is None:
            return
        self._give(seq.pages)
        seq.pages.clear()
        if self.device_table is not None and seq.table_row:
            self.device_table.give_row(seq.table_row)

    # -- page allocation --------------------------------------------------------------------
    def _give(self, pages: list[int]) -> None:
        """Put pages back on the free list (and the lowest-page heap)."""
        for p in pages:
            self._where[p] = len(self._free)
            self._free.append(p)
            if self.policy == "contiguous":  # the only policy that asks for the lowest page
                heapq.heappush(self._lowest, p)
        if len(self._lowest) > 2 * self.num_pages:  # mostly stale entries: rebuild (amortized)
            self._lowest = sorted(self._free)

    def _take_lowest(self) -> int:
        """The lowest free page (what `min(free)` would give), off the heap."""
        heap = self._lowest
        while True:
            page = heapq.heappop(heap)
            if page in self._where:
                return self._take(page)

    def _take(self, page: int) -> int:
        i = self._where.pop(page)
        last = self._free.pop()
        if last != page:  # swap-remove keeps both structures O(1)
            self._free[i] = last
            self._where[last] = i
        return page

    def _new_page(self, seq: SeqKV) -> int:
        if len(seq.pages) >= seq.reserved_pages and self.free_pages <= self._outstanding():
            raise BackendError(
                f"KV pool exhausted: request {seq.request_id!r} outgrew its "
                f"{seq.reserved_pages}-page reservation",
                503,
            )
        if not self._free:
            raise BackendError("KV pool exhausted", 503)
        if self.policy == "scattered":
            return self._take(self._free[self._rng.randrange(len(self._free))])
        after = seq.pages[-1] + 1 if seq.pages else None
        if after is not None and after in self._where:
            return self._take(after)
        return self._take_lowest()

    def slot_ids(self, seq: SeqKV, start: int, stop: int) -> list[int]:
        """Pool slots of rows start..stop-1, computed on the host (O(rows), no device work)."""
        ps, pages = self.page_size, seq.pages
        if stop - start == 1:  # a decode step's one row: no comprehension
            return [pages[start // ps] * ps + start % ps]
        return [pages[r // ps] * ps + r % ps for r in range(start, stop)]

    def _slots_of_rows(self, seq: SeqKV, start: int, stop: int) -> torch.Tensor:
        """`slot_ids` as a long CPU tensor, computed page-wise in numpy: a whole context per
        request per eager step is too many rows for a Python loop."""
        if stop <= start:
            return torch.empty(0, dtype=torch.long)
        ps = self.page_size
        first, last = start // ps, (stop - 1) // ps + 1
        pages = np.asarray(seq.pages[first:last], dtype=np.int64)
        slots = (pages[:, None] * ps + np.arange(ps, dtype=np.int64)).reshape(-1)
        return torch.from_numpy(slots[start - first * ps : stop - first * ps])

    # -- the per-request operations ---------------------------------------------------------
    def alloc_rows(self, seq: SeqKV, n: int) -> list[int]:
        """Hand out the next `n` rows (growing the page table); their slots, on the host."""
        start = seq.num_rows
        while len(seq.pages) * self.page_size < start + n:
            seq.pages.append(self._new_page(seq))
        seq.num_rows = start + n
        return self.slot_ids(seq, start, start + n)

    def alloc_slots(self, seq: SeqKV, n: int) -> torch.Tensor:
        """`alloc_rows` as a long tensor [n] on the pool's device."""
        return torch.tensor(self.alloc_rows(seq, n), dtype=torch.long, device=self.device)

    def commit(self, seq: SeqKV, n: int) -> None:
        """Make the next `n` rows (already written: prefill, decode, accepted drafts moved or
        reordered into place) part of the visible context."""
        if seq.context_len + n > seq.num_rows:
            raise ValueError(
                f"cannot commit {n} rows: only {seq.num_rows - seq.context_len} pending"
            )
        seq.context_len += n

    def context_slots(self, seq: SeqKV) -> torch.Tensor:
        """Slots of the committed context in position order, long [context_len] on the host:
        `ForwardBatch.pack` sends a whole batch's slots to the device in one copy."""
        return self._slots_of_rows(seq, 0, seq.context_len)

    def reorder_rows(self, seq: SeqKV, start: int, order: list[int]) -> None:
        """Page size 1: let rows start, start+1, ... point at the slots rows start+order[0],
        start+order[1], ... held (no K/V copy); rows not named follow in their old order."""
        if self.page_size != 1:
            raise ValueError("reordering rows rewrites the page table per token: needs page_size 1")
        tail = seq.pages[start:]
        named = set(order)
        seq.pages[start:] = [tail[j] for j in order] + [
            p for j, p in enumerate(tail) if j not in named
        ]
        seq.table_synced = min(seq.table_synced, start)

    def move_rows(self, src_slots: Sequence[int], dst_slots: Sequence[int]) -> None:
        """Copy K/V rows (all layers) from src to dst slots: compaction of accepted drafts.
        The slots cross in one non-blocking copy from pinned memory: a blocking copy waits
        for all the device work queued before it, e.g. the DFlash drafting step launched at
        observe (on the H100 a tree step's "commit" read 0.25-0.30 ms a step with a blocking
        copy, 0.14-0.18 with this one, same call: docs/dflash.md, "Eighth device session")."""
        src, dst = host_to_device(np.array([src_slots, dst_slots], dtype=np.int64), self.device)
        self.k[:, dst] = self.k[:, src]
        self.v[:, dst] = self.v[:, src]

    def truncate(self, seq: SeqKV, num_rows: int) -> None:
        """Forget rows >= num_rows and free whole pages past them (pending drafts rejected)."""
        if num_rows < 0 or num_rows > seq.num_rows:
            raise ValueError(f"cannot truncate {seq.num_rows} rows to {num_rows}")
        seq.num_rows = num_rows
        keep = self.pages_for(num_rows)
        self._give(seq.pages[keep:])
        del seq.pages[keep:]
        seq.table_synced = min(seq.table_synced, keep)

    def rewind(self, seq: SeqKV, length: int) -> None:
        """Keep only the first `length` committed tokens, for a request whose context occupies
        rows 0..len-1 in order (plain decode, or compacted speculation); frees the rest."""
        if length > seq.context_len:
            raise ValueError(f"cannot rewind {seq.context_len} tokens to {length}")
        seq.context_len = length
        self.truncate(seq, length)

    # -- the device mirror of the page table ------------------------------------------------
    def enable_device_table(self, max_seqs: int, max_pages: int) -> DeviceBlockTable:
        """Keep a [max_seqs + 1, max_pages] int32 copy of the page tables on the device (row 0
        is a dummy for padded batch entries). Call before admitting requests."""
        if self.seqs:
            raise RuntimeError("enable the device block table before admitting requests")
        self.device_table = DeviceBlockTable(max_seqs, max_pages, self.device)
        return self.device_table

    def sync_device_table(self, seqs: list[SeqKV]) -> None:
        """Write the stale entries of these requests' rows (one batched copy, none if clean)."""
        table = self.device_table
        assert table is not None, "no device block table"
        rows: list[int] = []
        cols: list[int] = []
        vals: list[int] = []
        for seq in seqs:
            n = len(seq.pages)
            if seq.table_synced < n:
                start = seq.table_synced
                rows.extend([seq.table_row] * (n - start))
                cols.extend(range(start, n))
                vals.extend(seq.pages[start:])
                seq.table_synced = n
        if rows:
            if max(cols) >= table.max_pages:
                raise ValueError(
                    f"request outgrew the device block table ({table.max_pages} pages)"
                )
            # One non-blocking copy from pinned memory: a blocking one waits for the device to
            # finish every step queued before it (an overlapped step's, engine/overlap.py).
            new = host_to_device(np.array([rows, cols, vals], dtype=np.int64), self.device)
            table.table[new[0], new[1]] = new[2].to(torch.int32)


class DeviceBlockTable:
    """Fixed-capacity page tables on the device: what a CUDA-graph-captured attention kernel
    reads (its shape never changes; only entries do)."""

    def __init__(self, max_seqs: int, max_pages: int, device: torch.device):
        self.max_pages = max_pages
        self.table = torch.zeros(max_seqs + 1, max_pages, dtype=torch.int32, device=device)
        self._free_rows = list(range(max_seqs, 0, -1))

    def take_row(self) -> int:
        if not self._free_rows:
            raise BackendError("engine busy: no free block-table row", 503)
        return self._free_rows.pop()

    def give_row(self, row: int) -> None:
        self._free_rows.append(row)
