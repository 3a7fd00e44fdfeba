"""Paged KV cache: one fixed pool of pages, a page table per request, two allocation policies.

The pool holds `num_pages * page_size` token slots per layer (`k[layer]`, `v[layer]`:
[slots + 1, kv_heads, head_dim]; the extra last slot is a scratch target for padded writes).
A request's rows 0, 1, 2, ... map to slot `pages[row // page_size] * page_size + row % page_size`.

Policies (the story's question is whether the second one slows attention down):
- `contiguous`: a request's next page is the one right after its last page when free, else the
  lowest free page — a lone request gets one adjacent run of slots;
- `scattered`: the next page is drawn at random from the free list — fragmentation on purpose.

Admission control instead of mid-generation failure: `admit` reserves the pages a request can
ever need (prompt + max_tokens + speculation headroom) and raises `BackendError` (503) when the
pool cannot promise them, so a running request never runs out and never touches another's pages.

For speculation (ENGINE2) a request's KV is "committed context" (visible to every later token,
in position order) plus "pending rows" handed out by `alloc_slots`: verify k tokens in pending
rows, then `commit` the accepted ones (in place) or `move_rows` them to the front first
(compaction), and `truncate` to give back the rows past the context.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import torch

from specscope.serve.backend import BackendError

POLICIES = ("contiguous", "scattered")


@dataclass
class SeqKV:
    """One request's view of the pool."""

    request_id: str
    reserved_pages: int
    pages: list[int] = field(default_factory=list)
    num_rows: int = 0  # rows handed out by alloc_slots (committed or pending)
    # Slots of the committed context in position order (the expanded page table, kept
    # incrementally so a decode step does not rebuild it).
    context: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))

    @property
    def context_len(self) -> int:
        return int(self.context.numel())


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
        self._rng = random.Random(seed)
        self.seqs: dict[str, SeqKV] = {}

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
        seq = SeqKV(request_id, need, context=torch.empty(0, dtype=torch.long, device=self.device))
        self.seqs[request_id] = seq
        return seq

    def release(self, request_id: str) -> None:
        """Return the request's pages to the free list. Idempotent."""
        seq = self.seqs.pop(request_id, None)
        if seq is None:
            return
        for p in seq.pages:
            self._where[p] = len(self._free)
            self._free.append(p)
        seq.pages.clear()

    # -- page allocation --------------------------------------------------------------------
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
        return self._take(min(self._free))

    def _slots_of_rows(self, seq: SeqKV, start: int, stop: int) -> torch.Tensor:
        # Only the pages under the new rows are looked up: O(new rows), not O(context).
        first = start // self.page_size
        rows = torch.arange(start, stop)
        pages = torch.tensor(seq.pages[first : (stop - 1) // self.page_size + 1], dtype=torch.long)
        slots = pages[rows // self.page_size - first] * self.page_size + rows % self.page_size
        return slots.to(self.device)

    # -- the per-request operations ---------------------------------------------------------
    def alloc_slots(self, seq: SeqKV, n: int) -> torch.Tensor:
        """Hand out the next `n` rows (growing the page table) and return their slots [n]."""
        start = seq.num_rows
        while len(seq.pages) * self.page_size < start + n:
            seq.pages.append(self._new_page(seq))
        seq.num_rows = start + n
        return self._slots_of_rows(seq, start, start + n)

    def commit(self, seq: SeqKV, slots: torch.Tensor) -> None:
        """Append `slots` (already written, e.g. accepted tokens) to the visible context."""
        seq.context = torch.cat([seq.context, slots.to(self.device, torch.long)])

    def context_slots(self, seq: SeqKV) -> torch.Tensor:
        return seq.context

    def move_rows(self, src_slots: torch.Tensor, dst_slots: torch.Tensor) -> None:
        """Copy K/V rows (all layers) from src to dst slots: compaction of accepted drafts."""
        src, dst = src_slots.to(self.device), dst_slots.to(self.device)
        self.k[:, dst] = self.k[:, src]
        self.v[:, dst] = self.v[:, src]

    def truncate(self, seq: SeqKV, num_rows: int) -> None:
        """Forget rows >= num_rows and free whole pages past them (pending drafts rejected)."""
        if num_rows < 0 or num_rows > seq.num_rows:
            raise ValueError(f"cannot truncate {seq.num_rows} rows to {num_rows}")
        seq.num_rows = num_rows
        keep = self.pages_for(num_rows)
        for p in seq.pages[keep:]:
            self._where[p] = len(self._free)
            self._free.append(p)
        del seq.pages[keep:]

    def rewind(self, seq: SeqKV, length: int) -> None:
        """Keep only the first `length` committed tokens, for a request whose context occupies
        rows 0..len-1 in order (plain decode, or compacted speculation); frees the rest."""
        if length > seq.context_len:
            raise ValueError(f"cannot rewind {seq.context_len} tokens to {length}")
        seq.context = seq.context[:length]
        self.truncate(seq, length)
