"""The DFlash block step's shared pieces: the block's attention mask over a context of fixed
width, one block forward to the draft slots' top-k, and that top-k packed as one tensor for
one copy to the host. The eager drafter (dflash.py) and the captured CUDA graphs
(engine/cuda/dflash_graph.py) call the same functions, so what a graph replays is exactly what
the CPU tests check; a module of their own keeps the graph module from importing the drafter
that builds it.
"""

from __future__ import annotations

import numpy as np
import torch

from specscope.engine.model import Transformer
from specscope.engine.speculative.dflash_context import KV
from specscope.engine.speculative.dflash_model import DFlashDraftModel
from specscope.engine.speculative.draft_vocab import DraftHead


def block_attention(device: torch.device) -> str:
    """The served block's attention on `device` (engine.options.DRAFT_ATTENTION; the trainer
    keeps SDPA's): grouped matmuls on CUDA (0.042 ms less device time a drafting step than
    cuDNN's fused kernel on the H100, the same commits: the sixth device session,
    docs/dflash.md), SDPA's fused kernel on a CPU (no slower there: the shipped drafter's draft
    31.0 ms a step against 31.4 grouped, bench/engine_spec.py --dflash-attention sdpa,grouped,
    docs/dflash.md)."""
    return "grouped" if device.type == "cuda" else "sdpa"


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
    (engine.options.DRAFT_ATTENTION); the LM head over the draft vocabulary (`head`) for slots
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


def top_logprobs(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k log-probs (float32) and indices of logits [N, V], the largest first.

    Why not `topk(log_softmax(logits.float()))`: log-probs are the logits less one constant per
    row, so the logits in their own dtype order the same, and CUDA's multi-block radix select
    makes half the passes over bf16 (16 bits) as over float32. (A two-stage top-k over
    1,024-wide slices paid nothing: its single-block kernel took 25 us a call, both stages, on
    the H100 in the sixth device session.)"""
    k = min(k, logits.shape[-1])
    lse = torch.logsumexp(logits.float(), dim=-1, keepdim=True)
    values, index = torch.topk(logits, k, dim=-1)
    return values.float() - lse, index


def pack_topk(top_lp: torch.Tensor, top_ids: torch.Tensor) -> torch.Tensor:
    """[..., k] float log-probs and int64 ids as one int64 tensor [..., 2k]: the ids, then the
    log-probs' float32 bits, so that one copy brings both to the host (`unpack_topk`)."""
    bits = top_lp.float().view(torch.int32).to(torch.int64)
    return torch.cat([top_ids, bits], dim=-1)


def unpack_topk(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`pack_topk`'s array on the host -> (log-probs float64, ids int64), both new arrays."""
    k = packed.shape[-1] // 2
    logprobs = packed[..., k:].astype(np.int32).view(np.float32).astype(np.float64)
    return logprobs, packed[..., :k].astype(np.int64)
