"""The model side of training: where blocks are anchored and what a block's loss is.

A DFlash drafter proposes a whole block [anchor, MASK x (B-1)] in one forward; training packs
many such blocks of one sequence into one query stream (each block sees the context strictly
before its anchor and itself) and weights slot k by exp(-(k-1)/gamma), because a drafted token
is only worth something if every slot before it was accepted. `expected_commit` turns per-slot
accuracies into the tokens per verify step a chain would commit, the number the card reports.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from specscope.engine.speculative.dflash_model import DFlashDraftModel
from specscope.engine.training.dataset import Sample


def position_weights(block_size: int, gamma: float) -> torch.Tensor:
    """w_k = exp(-(k-1)/gamma) for slots k = 1..B-1: early slots matter most (a draft is only
    worth something if every slot before it was accepted)."""
    return torch.exp(-torch.arange(block_size - 1, dtype=torch.float32) / gamma)


def sample_anchors(
    sample: Sample, block_size: int, count: int, rng: np.random.Generator
) -> np.ndarray:
    """Up to `count` distinct anchors among response positions that leave a full block
    (an anchor a needs the labels a+1..a+B-1 inside the sequence), sorted."""
    lo, hi = max(sample.prompt_len - 1, 1), len(sample.tokens) - block_size
    if hi < lo:
        return np.zeros(0, dtype=np.int64)
    choices = np.arange(lo, hi + 1)
    return np.sort(rng.choice(choices, size=min(count, len(choices)), replace=False))


def block_loss(
    draft: DFlashDraftModel,
    embed: torch.nn.Module,
    lm_head: torch.nn.Module,
    sample: Sample,
    anchors: np.ndarray,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted CE of one sequence's packed blocks, and per-slot accuracy (argmax == label)."""
    b = draft.config.block_size
    dev = draft.fc.weight.device
    tokens = torch.tensor(sample.tokens, device=dev)
    s, a = len(sample.tokens), torch.from_numpy(anchors).to(dev)
    n = len(anchors)
    fused = draft.fuse(sample.hidden.to(dev, torch.float32)[None])
    ctx = draft.context_kv(fused, torch.arange(s, device=dev)[None])
    x = draft.mask_embedding.expand(n, b, -1).clone()
    x[:, 0] = embed(tokens[a])
    positions = (a[:, None] + torch.arange(b, device=dev)).reshape(1, -1)
    block_of = torch.arange(n, device=dev).repeat_interleave(b)
    sees_ctx = torch.arange(s, device=dev)[None, :] < a.repeat_interleave(b)[:, None]
    sees_block = block_of[:, None] == block_of[None, :]
    mask = torch.cat([sees_ctx, sees_block], dim=1)[None, None]
    hidden = draft.block_hidden(x.reshape(1, n * b, -1), positions, ctx, mask)
    # A contiguous 2-D matrix: a strided 3-D input sends the LM head through a slow batched matmul.
    hidden = hidden.view(n, b, -1)[:, 1:].reshape(n * (b - 1), -1)
    logits = lm_head(hidden.to(lm_head.weight.dtype)).float().view(n, b - 1, -1)  # bf16 head on GPU
    labels = tokens[a[:, None] + torch.arange(1, b, device=dev)]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
    w = position_weights(b, gamma).to(dev)
    loss = (ce.view(n, b - 1) * w).sum() / (w.sum() * n)
    acc = (logits.argmax(-1) == labels).float().mean(0)
    return loss, acc.detach()


def expected_commit(acc: np.ndarray) -> float:
    """Tokens per step a chain would commit if slot accuracies were independent: 1 + sum_k prod_{j<=k}."""
    return float(1.0 + np.cumprod(acc).sum())
