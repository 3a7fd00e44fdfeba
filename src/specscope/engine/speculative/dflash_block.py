"""The DFlash block step's shared pieces: the block's attention mask over a context of fixed
width, and one block forward to the draft slots' top-k. The eager drafter (dflash.py) and the
captured CUDA graphs (engine/cuda/dflash_graph.py) call the same two functions, so what a graph
replays is exactly what the CPU tests check; a module of their own keeps the graph module from
importing the drafter that builds it.
"""

from __future__ import annotations

import torch

from specscope.engine.model import Transformer
from specscope.engine.speculative.dflash_context import KV
from specscope.engine.speculative.dflash_model import DFlashDraftModel
from specscope.engine.speculative.draft_vocab import DraftHead


def block_mask(visible: torch.Tensor, width: int, block: int) -> torch.Tensor:
    """Attention mask [R, 1, block, width + block]: request r's first visible[r] context rows
    of `width`, and the whole block (bidirectional)."""
    seen = torch.arange(width, device=visible.device) < visible[:, None]
    seen = torch.cat([seen, seen.new_ones(seen.shape[0], block)], dim=1)
    return seen[:, None, None, :].expand(-1, 1, block, -1)


def block_topk(
    model: DFlashDraftModel,
    target: Transformer,
    head: DraftHead,
    ctx: KV,
    anchors: torch.Tensor,
    lengths: torch.Tensor,
    mask: torch.Tensor | None,
    depth: int,
    top_k: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One block forward for R requests: [anchor, MASK x (B-1)] at positions length.., over the
    context K/V `ctx` (per layer [R, rows, kv_heads, head_dim]) under `mask`; the LM head over
    the draft vocabulary (`head`) for slots 1..depth; top-k log-probs and target ids
    [R, depth, k]. Captured as is in a graph."""
    b, r = model.config.block_size, anchors.shape[0]
    dtype = model.fc.weight.dtype
    positions = lengths[:, None] + torch.arange(b, device=anchors.device)
    x = torch.cat(
        [
            target.embed_tokens(anchors).to(dtype)[:, None],
            model.mask_embedding.to(dtype).expand(r, b - 1, -1),
        ],
        dim=1,
    )
    hidden = model.block_hidden(x, positions, ctx, mask)
    head_in = hidden[:, 1 : 1 + depth].reshape(-1, hidden.shape[-1])  # 2-D: the fast matmul
    logp = torch.log_softmax(head.logits(head_in).float(), dim=-1).view(r, depth, -1)
    top_lp, top_index = torch.topk(logp, min(top_k, logp.shape[-1]), dim=-1)
    return top_lp, head.to_target(top_index)
