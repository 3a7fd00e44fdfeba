"""A draft model (same vocabulary as the target) run autoregressively for k steps.

The drafter keeps its own KV cache per request (an `EngineLM`: the engine's Transformer over a
KV pool of its own), and
remembers which tokens that cache holds. Each round it finds the longest common prefix between
the cache and the request's committed tokens, drops the rest (rejected drafts from the last
round), feeds the missing committed tokens in one forward, then drafts k tokens one forward at a
time. So it needs no "accept" callback: the next propose() reconciles by itself.

At every depth it keeps the top-K of its distribution (for DDTree) besides the chain token
(argmax at T = 0; a sample from q at T > 0, with q kept for rejection sampling).

Draft window W: the drafter's view starts at a window base that moves forward in strides of
W/4, so it always sees at most W tokens (never older ones) while re-prefilling only once per
stride instead of every step (RoPE is relative, so the position offset does not matter).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from specscope.engine.kv_cache import KVCache
from specscope.engine.model import ForwardBatch, NewTokens, Transformer
from specscope.engine.speculative.drafter import Draft, DraftRequest


def window_base(n_tokens: int, draft_window: int | None) -> int:
    """First token the drafter may see: moves in strides of W/4 so n - base <= W."""
    if not draft_window or draft_window <= 0 or n_tokens <= draft_window:
        return 0
    stride = max(1, draft_window // 4)
    return math.ceil((n_tokens - draft_window) / stride) * stride


@dataclass
class _State:
    base: int = 0  # absolute index of the drafter's first visible token
    cached: list[int] = field(default_factory=list)  # tokens in the draft cache, from `base`


class ModelDrafter:
    def __init__(
        self, lm: EngineLM, top_k: int = 8, draft_window: int | None = None, name: str = "model"
    ):
        self.lm = lm
        self.top_k = max(1, int(top_k))
        self.draft_window = draft_window
        self.name = name
        self._states: dict[str, _State] = {}
        self._generators: dict[str, torch.Generator] = {}

    def propose(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        """k draft-model forwards for the whole batch: one catch-up forward (the committed tokens
        the draft cache lacks), then one single-token forward per further depth."""
        drafts = [Draft() for _ in requests]
        live = [i for i, r in enumerate(requests) if r.num_draft_tokens > 0 and len(r.tokens)]
        items, states = [], {}
        for i in live:
            req = requests[i]
            state = self._states.setdefault(req.request_id, _State())
            base = window_base(len(req.tokens), self.draft_window)
            if base != state.base:
                state.base, state.cached = base, []
            ctx = [int(t) for t in req.tokens[base:]]
            common = 0
            for a, b in zip(state.cached, ctx, strict=False):
                if a != b:
                    break
                common += 1
            common = min(common, len(ctx) - 1)  # always feed at least the anchor to get logits
            items.append((req.request_id, ctx[common:], common))
            state.cached = ctx
            states[i] = state
        logits = [out[-1] for out in self.lm.extend(items)] if items else []
        acc: dict[int, tuple[list, list, list, list]] = {i: ([], [], [], []) for i in live}
        depth = 0
        while live:
            step_items, next_live = [], []
            for i, row in zip(live, logits, strict=True):
                req = requests[i]
                chain, top_ids, top_lps, q_rows = acc[i]
                tok = self._pick(req, row, top_ids, top_lps, q_rows)
                chain.append(tok)
                if depth + 1 < req.num_draft_tokens:
                    step_items.append((req.request_id, [tok], len(states[i].cached)))
                    states[i].cached.append(tok)
                    next_live.append(i)
            logits = [out[-1] for out in self.lm.extend(step_items)] if step_items else []
            live, depth = next_live, depth + 1
        for i, (chain, top_ids, top_lps, q_rows) in acc.items():
            drafts[i] = Draft(
                sequences=[chain],
                topk_tokens=np.stack(top_ids).astype(np.int64),
                topk_logprobs=np.stack(top_lps).astype(np.float64),
                q_probs=np.stack(q_rows) if q_rows else None,
            )
        return drafts

    def _pick(
        self, req: DraftRequest, logits: torch.Tensor, top_ids: list, top_lps: list, q_rows: list
    ) -> int:
        """Record this depth's top-K and choose the chain token (argmax, or a sample from q)."""
        logits = logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        lp, ids = torch.topk(logp, min(self.top_k, logp.shape[-1]))
        top_ids.append(ids.cpu().numpy())
        top_lps.append(lp.cpu().numpy())
        if req.temperature <= 0:
            return int(ids[0].item())
        q = torch.softmax(logits.double() / req.temperature, dim=-1).cpu()
        q_rows.append(q.numpy())
        return int(torch.multinomial(q, 1, generator=self._generator(req)).item())

    def release(self, request_id: str) -> None:
        if self._states.pop(request_id, None) is not None:
            self.lm.release(request_id)
        self._generators.pop(request_id, None)

    def _generator(self, req: DraftRequest) -> torch.Generator:
        gen = self._generators.get(req.request_id)
        if gen is None:
            gen = torch.Generator()
            gen.manual_seed(req.seed if req.seed is not None else torch.seed())
            self._generators[req.request_id] = gen
        return gen


# -- the draft model's cache ------------------------------------------------------------------
# The draft model gets a KV pool of its own (separate from the target's), so a drafter can be any
# Llama-family model with the target's vocabulary. Invariant per request: the cache's committed
# context == the drafter's cached tokens, in position order; `extend` first cuts it back to
# `start` (dropping last round's rejected drafts), then appends.


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
                seq.context_len = min(seq.context_len, start)
            news.append(
                NewTokens(
                    token_ids=[int(t) for t in tokens],
                    positions=list(range(start, start + len(tokens))),
                    write_slots=self.kv.alloc_rows(seq, len(tokens)),
                    context_slots=self.kv.context_slots(seq),
                )
            )
        if not news:
            return []
        batch = ForwardBatch.pack(news, device=self.kv.device, pad_slot=self.kv.pad_slot)
        logits = self.model(batch, self.kv)
        out = []
        for r, ((request_id, tokens, _), _new) in enumerate(zip(items, news, strict=True)):
            self.kv.commit(self.kv.seqs[request_id], len(tokens))
            out.append(logits[r, : len(tokens)])
        return out

    def release(self, request_id: str) -> None:
        self.kv.release(request_id)


def early_exit_model(model: Transformer, num_layers: int) -> Transformer:
    """A draft model made of the target's first `num_layers` layers + its final norm and head
    (LayerSkip-style self-speculation). Shares every weight with the target: no extra memory,
    same vocabulary by construction, and much cheaper per token than the full model."""
    if not 1 <= num_layers <= model.cfg.num_layers:
        raise ValueError(
            f"early-exit drafter needs 1..{model.cfg.num_layers} layers, got {num_layers}"
        )
    cfg = replace(model.cfg, num_layers=num_layers)
    with torch.device("meta"):
        draft = Transformer(cfg)
    draft.embed_tokens = model.embed_tokens
    draft.layers = torch.nn.ModuleList(list(model.layers)[:num_layers])
    draft.norm = model.norm
    draft.lm_head = model.lm_head
    draft.inv_freq = model.inv_freq
    return draft.eval()
