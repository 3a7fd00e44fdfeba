"""`CachedLM` over the engine's own Transformer and paged KVCache: the draft model's cache.

The draft model gets a KV pool of its own (separate from the target's), so a drafter can be any
Llama-family model with the target's vocabulary. Invariant per request: the cache's committed
context == the drafter's cached tokens, in position order; `extend` first cuts it back to
`start` (dropping last round's rejected drafts), then appends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from specscope.engine.kv_cache import KVCache
from specscope.engine.model import ForwardBatch, NewTokens, Transformer


class EngineLM:
    def __init__(self, model: Transformer, kv: KVCache, max_rows: int | Callable[[str], int]):
        self.model = model
        self.kv = kv
        # Rows one request may ever hold in the draft cache (a number, or per request: the
        # backend passes the target's reservation, so a draft pool as large as the target's
        # can never refuse a request the target admitted).
        self.max_rows = max_rows
        self.vocab_size = model.cfg.vocab_size

    def extend(self, items: Sequence[tuple[str, Sequence[int], int]]) -> list[torch.Tensor]:
        news = []
        for request_id, tokens, start in items:
            seq = self.kv.seqs.get(request_id)
            if seq is None:
                rows = self.max_rows(request_id) if callable(self.max_rows) else self.max_rows
                seq = self.kv.admit(request_id, rows)
            if start < seq.num_rows:
                self.kv.truncate(seq, start)
                seq.context = seq.context[:start]
            slots = self.kv.alloc_slots(seq, len(tokens))
            news.append(
                NewTokens(
                    token_ids=[int(t) for t in tokens],
                    positions=list(range(start, start + len(tokens))),
                    write_slots=slots,
                    context_slots=self.kv.context_slots(seq),
                )
            )
        if not news:
            return []
        batch = ForwardBatch.pack(news, device=self.kv.device, pad_slot=self.kv.pad_slot)
        logits = self.model(batch, self.kv)
        out = []
        for r, ((request_id, tokens, _), new) in enumerate(zip(items, news, strict=True)):
            self.kv.commit(self.kv.seqs[request_id], new.write_slots)
            out.append(logits[r, : len(tokens)])
        return out

    def release(self, request_id: str) -> None:
        self.kv.release(request_id)


def early_exit_model(model: Transformer, num_layers: int) -> Transformer:
    """A draft model made of the target's first `num_layers` layers + its final norm and head
    (LayerSkip-style self-speculation). Shares every weight with the target: no extra memory,
    same vocabulary by construction, and much cheaper per token than the full model."""
    if not 1 <= num_layers <= model.cfg.num_layers:
        raise ValueError(f"early-exit drafter needs 1..{model.cfg.num_layers} layers, got {num_layers}")
    cfg = replace(model.cfg, num_layers=num_layers)
    with torch.device("meta"):
        draft = Transformer(cfg)
    draft.embed_tokens = model.embed_tokens
    draft.layers = torch.nn.ModuleList(list(model.layers)[:num_layers])
    draft.norm = model.norm
    draft.lm_head = model.lm_head
    draft.inv_freq = model.inv_freq
    return draft.eval()
