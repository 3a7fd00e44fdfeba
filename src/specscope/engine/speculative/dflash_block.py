"""The DFlash block step's shared pieces: the block's attention mask over a context of fixed
width, and one block forward to the draft slots' top-k. The eager drafter (dflash.py) and the
captured CUDA graphs (engine/cuda/dflash_graph.py) call the same two functions, so what a graph
replays is exactly what the CPU tests check; a module of their own keeps the graph module from
importing the drafter that builds it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specscope.engine.model import Transformer
from specscope.engine.speculative.dflash_context import KV
from specscope.engine.speculative.dflash_model import DFlashDraftModel
from specscope.engine.speculative.draft_vocab import DraftHead

#: The served block's attention (dflash_model.ATTENTION; the trainer keeps SDPA's default).
BLOCK_ATTENTION = "sdpa"
TOPK_CHUNK = 1024  # the slice width of the block's two-stage top-k (`top_logprobs`)


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
    attention: str = "sdpa",
) -> tuple[torch.Tensor, torch.Tensor]:
    """One block forward for R requests: [anchor, MASK x (B-1)] at positions length.., over the
    context K/V `ctx` (per layer [R, rows, kv_heads, head_dim]) under `mask`, by `attention`
    (dflash_model.ATTENTION); the LM head over the draft vocabulary (`head`) for slots
    1..depth; top-k log-probs and target ids [R, depth, k]. Captured as is in a graph."""
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
    hidden = model.block_hidden(x, positions, ctx, mask, attention)
    head_in = hidden[:, 1 : 1 + depth].reshape(-1, hidden.shape[-1])  # 2-D: the fast matmul
    top_lp, top_index = top_logprobs(head.logits(head_in), top_k)
    return top_lp.view(r, depth, -1), head.to_target(top_index).view(r, depth, -1)


def top_logprobs(
    logits: torch.Tensor, k: int, chunk: int = TOPK_CHUNK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k log-probs (float32) and indices of logits [N, V], the largest first.

    Why not `topk(log_softmax(logits.float()))`: log-probs are the logits less one constant per
    row, so the logits (in their own dtype: half the bytes in bf16) order the same; and a top-k
    over a whole 49,152-token row for a few rows is CUDA's multi-block radix select, 14 kernels
    and ~48 us of a ~270 us drafting step on the H100 (the fifth device session's profile). Rows
    cut into `chunk`-wide slices take one single-block top-k over all slices, then one over the
    slices' winners (the row's top k are among them); -inf pads a row to a multiple of `chunk`."""
    n, v = logits.shape
    k = min(k, v)
    lse = torch.logsumexp(logits.float(), dim=-1, keepdim=True)
    if v <= chunk or k > chunk:
        values, index = torch.topk(logits, k, dim=-1)
        return values.float() - lse, index
    pad = -v % chunk
    if pad:
        logits = F.pad(logits, (0, pad), value=float("-inf"))
    slices = logits.view(n, -1, chunk)
    values, index = torch.topk(slices, k, dim=-1, sorted=False)  # [N, slices, k]
    index = index + torch.arange(slices.shape[1], device=logits.device)[:, None] * chunk
    values, pick = torch.topk(values.flatten(1), k, dim=-1)
    return values.float() - lse, index.flatten(1).gather(1, pick)
