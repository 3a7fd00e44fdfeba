"""The training loop: AdamW over the drafter with the target frozen, warmup + cosine schedule,
gradient clipping, a loss curve and held-out checks as it goes.

Seeded end to end (anchors, initialisation, the order sequences are drawn in), so the same
arguments and step count give the same weights. A time budget (`minutes`) is turned into a step
count before the first step, by timing a few passes: the schedule needs its length up front, and
the card can then say `--steps N` to repeat the run exactly.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from specscope.engine.loader import LoadedModel
from specscope.engine.speculative.dflash_model import DFlashDraftModel
from specscope.engine.training.dataset import Sample
from specscope.engine.training.loss import block_loss, expected_commit, sample_anchors


@dataclass
class TrainSettings:
    steps: int | None = None  # fixed step count (reproducible); None: fill `minutes`
    minutes: float = 20.0
    lr: float = 6e-4
    warmup: float = 0.04
    anchors: int = 32
    seqs_per_step: int = 1
    gamma: float = 7.0
    clip: float = 1.0
    seed: int = 0
    log_every: int = 10
    validate_every: int = 0  # steps between held-out checks (0: ten over the run)


def validation_point(
    draft: DFlashDraftModel,
    target: LoadedModel,
    held_out: list[Sample],
    anchors: int,
    gamma: float,
    seed: int = 0,
) -> dict[str, float]:
    """Loss and per-slot accuracy on sequences training never saw (fixed anchors per sequence),
    with the expected chain commit they imply: the training accuracy alone cannot tell a drafter
    that learnt the target from one that memorised its training sequences."""
    embed, lm_head = target.model.embed_tokens, target.model.lm_head
    rng = np.random.default_rng(seed)
    losses, accs = [], []
    was_training = draft.training
    draft.eval()
    with torch.no_grad():
        for sample in held_out:
            picked = sample_anchors(sample, draft.config.block_size, anchors, rng)
            if len(picked):
                loss, acc = block_loss(draft, embed, lm_head, sample, picked, gamma)
                losses.append(float(loss))
                accs.append(acc.cpu().numpy())
    draft.train(was_training)
    if not accs:
        return {}
    acc = np.mean(accs, axis=0)
    return {
        "loss": round(float(np.mean(losses)), 4),
        "slot1_acc": round(float(acc[0]), 4),
        "expected_commit": round(expected_commit(acc), 3),
    }


def learning_rate(st: TrainSettings, step: int, total: int) -> float:
    """Linear warmup over the first `st.warmup` of the run, then cosine decay to 0 (0-based
    `step`)."""
    warm = max(1, int(st.warmup * total))
    if step < warm:
        return st.lr * (step + 1) / warm
    return st.lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def timed_step_count(
    draft: DFlashDraftModel,
    target: LoadedModel,
    usable: list[Sample],
    st: TrainSettings,
    log=print,
) -> int:
    """The step count that fills `st.minutes`: a few forward+backward passes timed (own RNG,
    gradients dropped) before the schedule starts, so the run equals `--steps total`."""
    embed, lm_head = target.model.embed_tokens, target.model.lm_head
    block = draft.config.block_size
    probe_rng = np.random.default_rng(st.seed + 1)
    # One untimed pass first: kernel loading and allocator growth are not a step's cost.
    sample = usable[int(probe_rng.integers(len(usable)))]
    block_loss(
        draft,
        embed,
        lm_head,
        sample,
        sample_anchors(sample, block, st.anchors, probe_rng),
        st.gamma,
    )[0].backward()
    if target.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2 * st.seqs_per_step):
        sample = usable[int(probe_rng.integers(len(usable)))]
        anchors = sample_anchors(sample, block, st.anchors, probe_rng)
        block_loss(draft, embed, lm_head, sample, anchors, st.gamma)[0].backward()
    if target.device.type == "cuda":
        torch.cuda.synchronize()
    draft.zero_grad(set_to_none=True)
    per_step = (time.perf_counter() - t0) / 2 * 1.05  # + the optimizer step
    total = max(4, int(st.minutes * 60 / per_step))
    log(f"train: ~{per_step:.2f} s/step -> {total} steps in {st.minutes} min")
    return total


class _Tally:
    """What a run records as it goes: the loss curve (the mean over each logging window),
    per-slot accuracy over the whole run and over its last tenth, the held-out points."""

    def __init__(self, slots: int, total: int, t0: float):
        self.total, self.t0 = total, t0
        self.acc_sum = np.zeros(slots)  # over the whole run
        self.acc_n = 0
        self.recent: list[np.ndarray] = []  # per-step accuracies of the last tenth of the run
        self.window: list[float] = []
        self.curve: list[dict[str, float]] = []
        self.validation: list[dict[str, float]] = []

    def accuracy(self, step: int, acc: np.ndarray) -> None:
        """One sequence's per-slot accuracy at (0-based) `step`."""
        self.acc_sum += acc
        self.acc_n += 1
        if step >= self.total - max(1, self.total // 10):
            self.recent.append(acc)

    def loss(self, step: int, loss: float, lr: float, every: int, log) -> None:
        """The loss of (1-based) `step`; a curve point every `every` steps and at the end."""
        self.window.append(loss)
        if step % every == 0 or step == self.total:
            point = {
                "step": step,
                "loss": round(float(np.mean(self.window)), 4),
                "lr": lr,
                "elapsed_s": round(time.perf_counter() - self.t0, 1),
            }
            self.curve.append(point)
            log(f"train: {point} slot-1 acc (run mean) {self.acc_sum[0] / max(self.acc_n, 1):.3f}")
            self.window = []

    def history(self, steps: int) -> dict[str, Any]:
        return {
            "steps": steps,
            "train_s": round(time.perf_counter() - self.t0, 1),
            "curve": self.curve,
            "validation": self.validation,
            "slot_accuracy_run": [round(float(v), 4) for v in self.acc_sum / max(self.acc_n, 1)],
            "slot_accuracy_last": [round(float(v), 4) for v in np.mean(self.recent, axis=0)],
        }


def train(
    draft: DFlashDraftModel,
    target: LoadedModel,
    data: list[Sample],
    st: TrainSettings,
    log=print,
    held_out: list[Sample] | None = None,
) -> dict[str, Any]:
    """Train in place; returns the history (loss per logged step, per-slot accuracy, timing,
    and the held-out loss/accuracy at regular steps when `held_out` sequences are given)."""
    embed, lm_head = target.model.embed_tokens, target.model.lm_head
    for p in target.model.parameters():
        p.requires_grad_(False)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=st.lr, betas=(0.9, 0.95), weight_decay=0.0)
    rng = np.random.default_rng(st.seed)
    torch.manual_seed(st.seed)
    block = draft.config.block_size
    usable = [s for s in data if len(s.tokens) - s.prompt_len > block]
    if not usable:
        raise ValueError("no training sequence has a response longer than one block")
    draft.train()
    total = st.steps if st.steps is not None else timed_step_count(draft, target, usable, st, log)
    tally = _Tally(block - 1, total, time.perf_counter())
    held = [s for s in held_out or [] if len(s.tokens) - s.prompt_len > block]
    every = st.validate_every or max(1, total // 10)
    for step in range(total):
        lr = learning_rate(st, step, total)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss_val = 0.0
        for _ in range(st.seqs_per_step):
            sample = usable[int(rng.integers(len(usable)))]
            anchors = sample_anchors(sample, block, st.anchors, rng)
            loss, acc = block_loss(draft, embed, lm_head, sample, anchors, st.gamma)
            (loss / st.seqs_per_step).backward()
            loss_val += float(loss.detach()) / st.seqs_per_step
            tally.accuracy(step, acc.cpu().numpy())
        torch.nn.utils.clip_grad_norm_(params, st.clip)
        opt.step()
        tally.loss(step + 1, loss_val, lr, st.log_every, log)
        if held and ((step + 1) % every == 0 or step + 1 == total):
            vp = validation_point(draft, target, held, st.anchors, st.gamma)
            tally.validation.append({"step": step + 1, **vp})
            log(f"held-out: {tally.validation[-1]}")
    draft.eval()
    return tally.history(total)
