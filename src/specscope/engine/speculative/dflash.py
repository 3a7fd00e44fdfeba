"""The DFlash drafter: one block forward per step, per-position marginals for chain or DDTree.

Per request it keeps every layer's keys/values of the projected target features of the
committed context (the stepper hands it the tapped hidden states of each position the target
commits: prefill chunks, then each verify's accepted path, see `HiddenStateDrafter`), so a step
costs one forward over B block slots, whatever the context length. Only the last
`draft_window` positions are attended (the story's 2048-token window; rows older than that are
dropped as they fall out).

propose(): block [anchor = the pending token, MASK x (B-1)] at positions n..n+B-1, where n is
the context length (the anchor's own features are not known yet: the reference semantics).
Slot d's distribution is the drafter's marginal for draft depth d; the chain is the per-slot
argmax (greedy even when the target samples: deterministic drafts, so verification treats q as
one-hot and stays lossless), and top-K per slot feeds DDTree's best-first tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from specscope.engine.model import Transformer
from specscope.engine.speculative.dflash_model import DFlashDraftModel
from specscope.engine.speculative.drafter import Draft, DraftRequest


@dataclass
class _Context:
    keys: list[torch.Tensor] = field(default_factory=list)  # per layer [rows, kv_heads, head_dim]
    values: list[torch.Tensor] = field(default_factory=list)
    length: int = 0  # context positions observed (absolute: rows cover length-rows..length-1)


class DFlashDrafter:
    def __init__(
        self,
        model: DFlashDraftModel,
        target: Transformer,
        *,
        top_k: int = 8,
        draft_window: int | None = None,
        name: str = "dflash",
    ):
        model.config.check_target(target.cfg)
        self.model, self.target = model, target
        self.block_size = model.config.block_size
        self.target_taps = tuple(model.config.target_layer_ids)
        self.top_k = max(1, int(top_k))
        self.draft_window = draft_window if draft_window and draft_window > 0 else None
        self.name = name
        self._contexts: dict[str, _Context] = {}

    @property
    def max_depth(self) -> int:
        """Drafts one block yields: every slot but the anchor's."""
        return self.block_size - 1

    @torch.inference_mode()
    def observe(self, request_id: str, hidden: torch.Tensor) -> None:
        ctx = self._contexts.setdefault(request_id, _Context())
        n = hidden.shape[0]
        if n == 0:
            return
        param = self.model.fc.weight
        positions = torch.arange(ctx.length, ctx.length + n, device=param.device)[None]
        fused = self.model.fuse(hidden.to(param.device, param.dtype)[None])
        kvs = self.model.context_kv(fused, positions)
        keep = self.draft_window
        for i, (k, v) in enumerate(kvs):
            if i < len(ctx.keys):
                k, v = torch.cat([ctx.keys[i], k[0]]), torch.cat([ctx.values[i], v[0]])
            else:
                k, v = k[0], v[0]
            if keep is not None and k.shape[0] > 2 * keep:  # drop what the window never shows
                k, v = k[-keep:], v[-keep:]
            if i < len(ctx.keys):
                ctx.keys[i], ctx.values[i] = k, v
            else:
                ctx.keys.append(k)
                ctx.values.append(v)
        ctx.length += n

    @torch.inference_mode()
    def propose(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        drafts = [Draft() for _ in requests]
        live = [i for i, r in enumerate(requests) if r.num_draft_tokens > 0 and len(r.tokens)]
        if not live:
            return drafts
        param = self.model.fc.weight
        dev, dtype, b = param.device, param.dtype, self.block_size
        contexts = []
        for i in live:
            req = requests[i]
            ctx = self._contexts.setdefault(req.request_id, _Context())
            if ctx.length != len(req.tokens) - 1:
                raise RuntimeError(
                    f"DFlash drafter out of step for {req.request_id!r}: it observed {ctx.length} "
                    f"context positions, the request has {len(req.tokens) - 1} cached"
                )
            contexts.append(ctx)
        rows = [self._visible(c) for c in contexts]
        if len(live) == 1 and contexts[0].keys and rows[0] > 0:
            # One request (batch-1 serving): its rows as they are, no padding, no mask.
            n = rows[0]
            kv_rows = [
                (k[-n:][None], v[-n:][None])
                for k, v in zip(contexts[0].keys, contexts[0].values, strict=True)
            ]
            mask = None
        else:
            kv_rows, mask = self._padded_context(contexts, rows, dev, dtype)
        anchors = torch.tensor([int(requests[i].tokens[-1]) for i in live], device=dev)
        x = self.model.mask_embedding.to(dtype).expand(len(live), b, -1).clone()
        x[:, 0] = self.target.embed_tokens(anchors).to(dtype)
        positions = torch.tensor([[c.length + j for j in range(b)] for c in contexts], device=dev)
        hidden = self.model.block_hidden(x, positions, kv_rows, mask)
        depth = min(self.max_depth, max(requests[i].num_draft_tokens for i in live))
        head_in = hidden[:, 1 : 1 + depth].reshape(-1, hidden.shape[-1])  # 2-D: the fast matmul
        logits = self.target.lm_head(head_in.to(self.target.lm_head.weight.dtype))
        logp = torch.log_softmax(logits.float(), dim=-1).view(len(live), depth, -1)
        top_lp, top_ids = torch.topk(logp, min(self.top_k, logp.shape[-1]), dim=-1)
        top_lp, top_ids = top_lp.cpu().numpy(), top_ids.cpu().numpy()
        for r, i in enumerate(live):
            k = min(depth, requests[i].num_draft_tokens)
            drafts[i] = Draft(
                sequences=[top_ids[r, :k, 0].tolist()],
                topk_tokens=top_ids[r, :k].astype(np.int64),
                topk_logprobs=top_lp[r, :k].astype(np.float64),
            )
        return drafts

    def _padded_context(
        self, contexts: list[_Context], rows: list[int], dev: torch.device, dtype: torch.dtype
    ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor | None]:
        """Several requests: their context rows left-aligned in [R, max rows] per layer, and the
        attention mask (own rows + the whole block), or None when every row is visible."""
        b, c_max = self.block_size, max(rows)
        layers = len(self.model.layers)
        kvh, hd = self.model.config.num_kv_heads, self.model.config.head_dim
        keys = [
            torch.zeros(len(contexts), c_max, kvh, hd, device=dev, dtype=dtype)
            for _ in range(layers)
        ]
        values = [torch.zeros_like(k) for k in keys]
        visible = torch.zeros(len(contexts), c_max + b, dtype=torch.bool)
        visible[:, c_max:] = True  # bidirectional inside the block
        for r, (ctx, n) in enumerate(zip(contexts, rows, strict=True)):
            visible[r, :n] = True
            for layer in range(min(layers, len(ctx.keys))):
                keys[layer][r, :n] = ctx.keys[layer][-n:] if n else ctx.keys[layer][:0]
                values[layer][r, :n] = ctx.values[layer][-n:] if n else ctx.values[layer][:0]
        mask = (
            None if bool(visible.all()) else visible[:, None, None, :].expand(-1, 1, b, -1).to(dev)
        )
        return list(zip(keys, values, strict=True)), mask

    def _visible(self, ctx: _Context) -> int:
        rows = ctx.keys[0].shape[0] if ctx.keys else 0
        return rows if self.draft_window is None else min(rows, self.draft_window)

    def release(self, request_id: str) -> None:
        self._contexts.pop(request_id, None)
