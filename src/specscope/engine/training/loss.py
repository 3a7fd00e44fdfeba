"""The model side of training: where blocks are anchored and what a block's loss is.

A DFlash drafter proposes a whole block [anchor, MASK x (B-1)] in one forward; a training step
runs many such blocks (each sees the context strictly before its anchor and itself) and weights
slot k by exp(-(k-1)/gamma), because a drafted token is only worth something if every slot
before it was accepted. `batch_loss` is the trainer's step (every block of every sequence of a
step in one forward, batch.py); `block_loss`, one sequence's blocks packed into one query
stream with the full fp32 logits, is the first trainer's, kept as the reference the batched
step is tested against and the throughput bench's anchor. `expected_commit` turns per-slot
accuracies into the tokens per verify step a chain would commit: tau_sim in the log and card.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from specscope.engine.speculative.dflash_model import DFlashDraftModel
from specscope.engine.speculative.draft_vocab import DraftHead
from specscope.engine.training.batch import StepBatch
from specscope.engine.training.dataset import Sample
from specscope.engine.training.head_loss import head_loss


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
    """Weighted CE of one sequence's packed blocks, and per-slot accuracy (argmax == label):
    the reference formulation (see the module docstring), not the trainer's step."""
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


def _block_inputs(
    draft: DFlashDraftModel, embed: torch.nn.Module, batch: StepBatch
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's inputs [R, m*B, D] (per block: anchor embedding, then the mask embedding),
    positions [R, m*B] and attention mask [R, 1, m*B, C + m*B] (a block sees the context
    before its anchor and its own slots; an unused slot sees only its own block)."""
    b, c = draft.config.block_size, batch.features.shape[1]
    (r, m), dev = batch.anchors.shape, batch.tokens.device
    x = draft.mask_embedding.expand(r, m, b, -1).clone()
    x[:, :, 0] = embed(batch.tokens[batch.row_seq[:, None], batch.anchors])
    positions = (batch.anchors[:, :, None] + torch.arange(b, device=dev)).view(r, m * b)
    sees_ctx = torch.arange(c, device=dev) < batch.anchors[:, :, None]  # [R, m, C]
    sees_ctx = sees_ctx[:, :, None, :].expand(r, m, b, c).reshape(r, m * b, c)
    block_of = torch.arange(m * b, device=dev) // b
    sees_block = (block_of[:, None] == block_of[None, :]).expand(r, -1, -1)
    mask = torch.cat([sees_ctx, sees_block], dim=2)[:, None]
    return x.view(r, m * b, -1), positions, mask


def batch_loss(
    draft: DFlashDraftModel,
    embed: torch.nn.Module,
    head: DraftHead,
    batch: StepBatch,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's loss (the mean over its sequences of `block_loss`) and per-slot accuracy per
    sequence [G, B-1], in one forward: context keys/values once per sequence, gathered per
    row of blocks (batch.py); the LM head over the draft vocabulary + CE by chunks
    (head_loss.py). A label outside the vocabulary weighs nothing and counts as a miss: the
    drafter can never propose it, so the accuracy (and tau_sim) say what serving would see."""
    b, g, n = draft.config.block_size, batch.sequences, len(batch.seq)
    dev = batch.tokens.device
    fused = draft.fuse(batch.features.to(draft.fc.weight.dtype))
    positions = torch.arange(fused.shape[1], device=dev).expand(g, -1)
    ctx = [(k[batch.row_seq], v[batch.row_seq]) for k, v in draft.context_kv(fused, positions)]
    x, block_positions, mask = _block_inputs(draft, embed, batch)
    hidden = draft.block_hidden(x, block_positions, ctx, mask)
    hidden = hidden.view(-1, b, hidden.shape[-1])[batch.valid.view(-1)]  # [N, B, D]
    anchors = batch.anchors[batch.valid]
    labels = batch.tokens[batch.seq[:, None], anchors[:, None] + torch.arange(1, b, device=dev)]
    w = position_weights(b, gamma).to(dev)
    index, known = head.from_target(labels.reshape(-1))
    row_weight = (batch.weight[:, None] * (w / w.sum())).reshape(-1) * known
    loss, correct = head_loss(
        hidden[:, 1:].reshape(n * (b - 1), -1), head.weight, index, row_weight
    )
    correct = correct & known
    per_seq = torch.zeros(g, b - 1, device=dev).index_add_(
        0, batch.seq, correct.view(n, b - 1).float()
    )
    counts = torch.bincount(batch.seq, minlength=g).clamp_min(1)
    return loss, per_seq / counts[:, None]


def expected_commit(acc: np.ndarray) -> float:
    """Tokens per step a chain would commit if slot accuracies were independent: 1 + sum_k prod_{j<=k}."""
    return float(1.0 + np.cumprod(acc).sum())
