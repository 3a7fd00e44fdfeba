"""The shared LM head's weighted cross-entropy, a chunk of rows at a time, never the full logits.

A training step of the GPU preset has ~30k label slots: their fp32 logits over a 49,152-token
vocabulary are 6 GB, and the plain `lm_head(h).float()` + `cross_entropy` path writes and reads
them several times (logits, log-softmax, its gradient), which costs more than the two matmuls.
Here each chunk of rows is projected (in the head's dtype: bf16 on the GPU), turned into fp32
log-probabilities in one fused pass and reduced to its loss and argmax, and, when a gradient is wanted, turned at once into the gradient of its
hidden rows: the head is frozen (the target's), so d(loss)/d(hidden) is all backward needs and
the forward keeps only that [rows, D] tensor. The numbers are those of the plain path up to
float rounding (tests/test_engine_dflash_train.py compares them).
"""

from __future__ import annotations

import torch

#: Logit elements per chunk (fp32: 1 GiB): ~5k rows of a 49k vocabulary, every row of a tiny one.
CHUNK_ELEMENTS = 1 << 28


def _chunk(
    weight: torch.Tensor, want_grad: bool, h: torch.Tensor, y: torch.Tensor, w: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Rows h with labels y and weights w: (sum of w * CE, argmax == y, d loss / d h or None)."""
    logits = h.to(weight.dtype) @ weight.t()
    correct = logits.argmax(-1) == y
    # One fused pass from the head's dtype to fp32 log-probabilities (no fp32 copy of logits).
    logp = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
    del logits
    loss = -(logp.gather(1, y[:, None])[:, 0] * w).sum()
    if not want_grad:
        return loss, correct, None
    probs = logp.exp_()  # softmax, in place
    probs.scatter_add_(1, y[:, None], -torch.ones_like(w)[:, None])
    grad = (probs.to(weight.dtype) @ weight).float() * w[:, None]
    return loss, correct, grad


def _run(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    row_weight: torch.Tensor,
    want_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Every chunk of rows; the gradient rows are written into one [rows, D] tensor."""
    rows = max(1, CHUNK_ELEMENTS // weight.shape[0])
    loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
    correct = torch.empty(hidden.shape[0], dtype=torch.bool, device=hidden.device)
    grad = torch.empty_like(hidden, dtype=torch.float32) if want_grad else None
    for s in range(0, hidden.shape[0], rows):
        e = s + rows
        part, correct[s:e], g = _chunk(weight, want_grad, hidden[s:e], labels[s:e], row_weight[s:e])
        loss += part
        if grad is not None:
            grad[s:e] = g
    return loss, correct, grad


class _HeadLoss(torch.autograd.Function):
    """Loss forward, gradient computed in the same pass and scaled by the incoming one."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, row_weight):
        loss, correct, grad = _run(hidden, weight, labels, row_weight, want_grad=True)
        ctx.save_for_backward(grad)
        ctx.hidden_dtype = hidden.dtype
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        (grad,) = ctx.saved_tensors
        return (grad * grad_loss).to(ctx.hidden_dtype), None, None, None


def head_loss(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, row_weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """sum_r row_weight[r] * CE(hidden[r] @ weight.T, labels[r]) and, per row, whether the
    argmax is the label. `weight` [vocab, D] is frozen (no gradient flows into it)."""
    # Dtypes are chosen here, not by autocast (which would copy the logits to fp32 first).
    with torch.autocast(hidden.device.type, enabled=False):
        if torch.is_grad_enabled() and hidden.requires_grad:
            return _HeadLoss.apply(hidden, weight.detach(), labels, row_weight.detach())
        loss, correct, _ = _run(hidden, weight, labels, row_weight, want_grad=False)
    return loss, correct
