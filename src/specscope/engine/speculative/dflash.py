"""The DFlash drafter: one block forward per step, per-position marginals for chain or DDTree.

Per request it keeps every layer's keys/values of the projected target features of the
committed context (the stepper hands it the tapped hidden states of each position the target
commits: prefill chunks, then each verify's accepted path, see `HiddenStateDrafter`), so a step
costs one forward over B block slots, whatever the context length. Only the last
`draft_window` positions are attended (the story's 2048-token window; rows older than that are
dropped as they fall out). The rows live in a fixed-size store per request
(dflash_context.py: a ring of the window's size, or of the target's maximum context without
a window, written in place).

propose(): block [anchor = the pending token, MASK x (B-1)] at positions n..n+B-1, where n is
the context length (the anchor's own features are not known yet: the reference semantics).
Slot d's distribution is the drafter's marginal for draft depth d; the chain is the per-slot
argmax (greedy even when the target samples: deterministic drafts, so verification treats q as
one-hot and stays lossless), and top-K per slot feeds DDTree's best-first tree.

Paths (`path`), one drafter semantics: "ring" (default; eager, a batch-1 block attends the
visible ring rows as views), "graph" (CUDA: a verify's accepted rows staged at `observe` and
written by the next propose in the same replay as the block, one CUDA graph a step over static
buffers, engine/cuda/dflash_graph.py), "static" (the functions the graphs capture, run eagerly:
how the CPU tests check them), "growing" (the previous torch.cat store, the reference). Several
requests at once take the padded eager path on every path (staged rows written first).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specscope.engine.cuda.dflash_graph import DFlashGraphs
from specscope.engine.model import Transformer
from specscope.engine.options import DRAFT_ATTENTION
from specscope.engine.speculative.dflash_block import (
    block_attention,
    block_mask,
    block_topk,
    pack_topk,
    unpack_topk,
)
from specscope.engine.speculative.dflash_context import (
    KV,
    Context,
    ContextPool,
    GrowingContext,
    RingContext,
)
from specscope.engine.speculative.dflash_model import DFlashDraftModel
from specscope.engine.speculative.drafter import Draft, DraftRequest

PATHS = ("ring", "graph", "static", "growing")


class DFlashDrafter:
    def __init__(
        self,
        model: DFlashDraftModel,
        target: Transformer,
        *,
        top_k: int = 8,
        draft_window: int | None = None,
        name: str = "dflash",
        path: str = "ring",
        compile: bool = False,
        attention: str | None = None,
        verify_rows: int = 0,
    ):
        model.config.check_target(target.cfg)
        if path not in PATHS:
            raise ValueError(f"DFlash drafter path must be one of {PATHS}, got {path!r}")
        attention = attention or block_attention(model.fc.weight.device)
        if attention not in DRAFT_ATTENTION:
            raise ValueError(
                f"DFlash attention must be one of {DRAFT_ATTENTION}, got {attention!r}"
            )
        self.model, self.target = model, target
        self.head = model.draft_head(target.lm_head.weight)  # gathered once: the vocabulary's rows
        # Tokens it may draft when that is not the target's whole vocabulary (server info).
        self.draft_vocab_size = self.head.size if self.head.ids is not None else 0
        self.block_size = model.config.block_size
        self.target_taps = tuple(model.config.target_layer_ids)
        self.top_k = max(1, int(top_k))
        self.draft_window = draft_window if draft_window and draft_window > 0 else None
        self.name = name
        self.path = path
        self.attention = attention
        if path == "growing":
            self.contexts = ContextPool(lambda _slot: GrowingContext(self.draft_window))
        else:
            # No window: the target's whole context fits, so no row is ever dropped.
            capacity = self.draft_window or target.cfg.max_position_embeddings
            self.contexts = ContextPool(lambda slot: RingContext(model, capacity, slot))
        self.graphs: DFlashGraphs | None = None
        if path in ("graph", "static"):
            self.graphs = DFlashGraphs(
                model,
                target,
                self.head,
                self.top_k,
                capture=path == "graph",
                compile=compile,
                attention=attention,
                verify_rows=verify_rows,
            )

    @property
    def max_depth(self) -> int:
        """Drafts one block yields: every slot but the anchor's."""
        return self.block_size - 1

    @torch.inference_mode()
    def warmup(self) -> None:
        """Capture the graphs over a first store now, so no serving step pays a capture."""
        if self.graphs is not None:
            self.graphs.capture(self.contexts.spare())

    @torch.inference_mode()
    def observe(
        self,
        request_id: str,
        hidden: torch.Tensor,
        rows: Sequence[int] | None = None,
        anchor: int | None = None,
    ) -> None:
        """Append the committed positions' tapped features: `hidden`'s `rows` (a verify's
        accepted path), or all of it. On the graph paths an update of up to B rows is staged
        and written by the next propose's replay (DFlashGraphs.stage), which starts now when
        the next propose's `anchor` is known; longer ones (prefill chunks) are written now,
        eagerly."""
        ctx = self.contexts.get(request_id)
        n = hidden.shape[0] if rows is None else len(rows)
        if n == 0:
            return
        if self.graphs is not None and self.graphs.covers(ctx) and self.graphs.stages(hidden, n):
            # Ahead only alone: with several requests their proposes are batched, eagerly.
            ahead = anchor if len(self.contexts) == 1 else None
            self.graphs.stage(ctx, hidden.to(self.model.fc.weight.device), rows, ahead)
            return
        self._settle()
        param = self.model.fc.weight
        if rows is not None:
            hidden = hidden[torch.as_tensor(list(rows), device=hidden.device)]
        ctx.append(self.model, hidden.to(param.device, param.dtype))

    def _settle(self) -> None:
        """Staged rows written before an eager step reads or extends any store."""
        if self.graphs is not None:
            self.graphs.flush()

    @torch.inference_mode()
    def propose(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        drafts = [Draft() for _ in requests]
        live = [i for i, r in enumerate(requests) if r.num_draft_tokens > 0 and len(r.tokens)]
        if not live:
            return drafts
        contexts = [self._in_step(requests[i]) for i in live]
        anchors = [int(requests[i].tokens[-1]) for i in live]
        depth = min(self.max_depth, max(requests[i].num_draft_tokens for i in live))
        if len(live) == 1 and self.graphs is not None and self.graphs.covers(contexts[0]):
            packed = self.graphs.propose(contexts[0], anchors[0])[None, :depth]
        else:
            self._settle()
            packed = pack_topk(*self._eager_topk(contexts, anchors, depth)).cpu().numpy()
        top_lp, top_ids = unpack_topk(packed)
        for r, i in enumerate(live):
            k = min(depth, requests[i].num_draft_tokens)
            drafts[i] = Draft(
                sequences=[top_ids[r, :k, 0].tolist()],
                topk_tokens=top_ids[r, :k],
                topk_logprobs=top_lp[r, :k],
            )
        return drafts

    def _in_step(self, req: DraftRequest) -> Context:
        ctx = self.contexts.get(req.request_id)
        if ctx.length != len(req.tokens) - 1:
            raise RuntimeError(
                f"DFlash drafter out of step for {req.request_id!r}: it observed {ctx.length} "
                f"context positions, the request has {len(req.tokens) - 1} cached"
            )
        return ctx

    def _eager_topk(
        self, contexts: list[Context], anchors: list[int], depth: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dev = self.model.fc.weight.device
        rows = contexts[0].rows() if len(contexts) == 1 else []
        if rows:  # one request (batch-1 serving): its rows as they are, no padding, no mask
            ctx, mask = [(k[None], v[None]) for k, v in rows], None
        else:
            ctx, mask = self._padded_context(contexts)
        return block_topk(
            self.model,
            self.target,
            self.head,
            ctx,
            torch.tensor(anchors, device=dev),
            torch.tensor([c.length for c in contexts], device=dev),
            mask,
            depth,
            self.top_k,
            self.attention,
        )

    def _padded_context(self, contexts: list[Context]) -> tuple[KV, torch.Tensor | None]:
        """Several requests: their context rows left-aligned in [R, max rows] per layer, and the
        attention mask (own rows + the whole block), or None when every row is visible."""
        rows = [c.rows() for c in contexts]
        counts = [r[0][0].shape[0] if r else 0 for r in rows]
        param, c_max = self.model.fc.weight, max(counts)
        cfg = self.model.config
        shape = (len(contexts), c_max, cfg.num_kv_heads, cfg.head_dim)
        keys = [param.new_zeros(shape) for _ in self.model.layers]
        values = [param.new_zeros(shape) for _ in self.model.layers]
        for r, (kv, n) in enumerate(zip(rows, counts, strict=True)):
            for layer, (k, v) in enumerate(kv):
                keys[layer][r, :n] = k
                values[layer][r, :n] = v
        visible = torch.tensor(counts, device=param.device)
        mask = None if min(counts) == c_max else block_mask(visible, c_max, self.block_size)
        return list(zip(keys, values, strict=True)), mask

    def release(self, request_id: str) -> None:
        ctx = self.contexts.release(request_id)
        if ctx is not None and self.graphs is not None:
            self.graphs.release(ctx)  # its staged rows, if any, are dropped: no update for it
