"""The training loop: AdamW over the drafter with the target frozen, warmup + cosine schedule,
gradient clipping, a loss curve and held-out checks as it goes; stops on time and resumes.

Seeded end to end (anchors, initialisation, the order sequences are drawn in), so the same
arguments and step count give the same weights, and a run stopped and resumed
(checkpoint.py) gives the weights of the uninterrupted one. A time budget (`minutes`) is
turned into a step count before the first step, by timing steps until their times settle:
the schedule needs its length up front, and the card can then say `--steps N` to repeat the
run exactly.

A step is one forward and one backward over all its sequences' blocks (batch.py, loss.py);
on CUDA under bf16 autocast with fp32 master weights and optimiser state.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from specscope.engine.loader import LoadedModel
from specscope.engine.speculative.dflash_model import DFlashDraftModel
from specscope.engine.training.batch import BLOCKS_PER_ROW, StepBatch, context_length, pack
from specscope.engine.training.checkpoint import (
    RunControl,
    Stopped,
    load_training,
    read_meta,
    save_training,
)
from specscope.engine.training.dataset import Sample, step_features
from specscope.engine.training.loss import batch_loss, expected_commit, sample_anchors
from specscope.engine.training.tally import Tally


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
    blocks_per_row: int = BLOCKS_PER_ROW  # the step's layout (batch.py): speed, not results
    attention: str = "auto"  # the attention kernels a step may use (ATTENTION): speed, not results


# `--attention`: which kernels scaled_dot_product_attention may pick in a training step.
# "no-cudnn" keeps cuDNN's out: its attention builds an execution plan per input shape, and a
# step's shapes (context length, rows of blocks) change from step to step (the first H100 run
# went at 118k label tokens/s against the fixed-shape bench's 335k; not yet measured apart).
ATTENTION = {
    "auto": None,
    "no-cudnn": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH],
}


def step_loss(
    draft: DFlashDraftModel,
    target: LoadedModel,
    samples: list[Sample],
    anchors: list[np.ndarray],
    gamma: float,
    blocks_per_row: int = BLOCKS_PER_ROW,
    attention: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(loss, per-sequence per-slot accuracy [G, B-1], label slots) of one step's sequences:
    features (cached or one target forward), then one drafter forward, bf16 on CUDA, with the
    attention kernels `attention` allows (ATTENTION)."""
    kernels = ATTENTION[attention]
    with sdpa_kernel(kernels) if kernels else contextlib.nullcontext():
        taps = tuple(draft.config.target_layer_ids)
        feats = step_features(target, taps, samples, context_length(anchors))
        batch = pack(samples, anchors, feats, target.device, blocks_per_row)
        return _drafter_loss(draft, target, batch, gamma)


def _drafter_loss(
    draft: DFlashDraftModel, target: LoadedModel, batch: StepBatch, gamma: float
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The drafter's forward over a packed step and its loss, under bf16 autocast on CUDA."""
    cuda = target.device.type == "cuda"
    amp = torch.autocast("cuda", torch.bfloat16) if cuda else contextlib.nullcontext()
    with amp:
        head = draft.draft_head(target.model.lm_head.weight)
        loss, acc = batch_loss(draft, target.model.embed_tokens, head, batch, gamma)
    return loss, acc, batch.label_slots(draft.config.block_size)


def draw(
    usable: list[Sample], count: int, block: int, anchors: int, rng: np.random.Generator
) -> tuple[list[Sample], list[np.ndarray]]:
    """A step's sequences and their anchors (a sequence, then its anchors, `count` times)."""
    samples, picked = [], []
    for _ in range(count):
        samples.append(usable[int(rng.integers(len(usable)))])
        picked.append(sample_anchors(samples[-1], block, anchors, rng))
    return samples, picked


def validation_point(
    draft: DFlashDraftModel,
    target: LoadedModel,
    held_out: list[Sample],
    st: TrainSettings,
) -> dict[str, Any]:
    """Loss, per-slot accuracy and tau_sim (the chain commit they imply, `expected_commit`)
    on sequences training never saw (fixed anchors per sequence), overall and per category:
    the training accuracy alone cannot tell a drafter that learnt the target from one that
    memorised its training sequences, and tau_sim is what the served tau is compared with.
    Sequences go `st.seqs_per_step` at a time, a training step's shape."""
    rng = np.random.default_rng(0)  # the same anchors at every point: points compare
    picked = [(s, sample_anchors(s, draft.config.block_size, st.anchors, rng)) for s in held_out]
    picked = [(s, a) for s, a in picked if len(a)]
    if not picked:
        return {}
    was_training = draft.training
    draft.eval()
    losses, accs = [], []
    with torch.no_grad():
        for g in range(0, len(picked), st.seqs_per_step):
            part = picked[g : g + st.seqs_per_step]
            samples, anchors = [s for s, _ in part], [a for _, a in part]
            loss, acc, _ = step_loss(
                draft, target, samples, anchors, st.gamma, st.blocks_per_row, st.attention
            )
            losses += [float(loss)] * len(part)
            accs += list(acc.float().cpu().numpy())
    draft.train(was_training)
    acc = np.mean(accs, axis=0)
    by_cat: dict[str, list[np.ndarray]] = {}
    for (s, _), a in zip(picked, accs, strict=True):
        by_cat.setdefault(s.category, []).append(a)
    return {
        "loss": round(float(np.mean(losses)), 4),
        "slot1_acc": round(float(acc[0]), 4),
        "tau_sim": round(expected_commit(acc), 3),
        "slot_acc": [round(float(v), 4) for v in acc],
        "tau_sim_by_category": {
            c: round(expected_commit(np.mean(v, axis=0)), 3) for c, v in by_cat.items()
        },
    }


def learning_rate(st: TrainSettings, step: int, total: int) -> float:
    """Linear warmup over the first `st.warmup` of the run, then cosine decay to 0 (0-based
    `step`)."""
    warm = max(1, int(st.warmup * total))
    if step < warm:
        return st.lr * (step + 1) / warm
    return st.lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


# Timing the step count (timed_step_count): steps are timed one by one until the last
# SETTLE_WINDOW agree with the window before them within SETTLE_SHARE (their medians), and at
# most PROBE_STEPS or PROBE_SHARE of the budget go into it. On the H100 (2026-12-05) the first
# steps of a run paid for new shapes (cuDNN attention plans; the features' forward at each new
# length): one untimed step and two timed ones read 2.60 s a step where the run went at 0.22,
# and a 4-minute run trained for 29 s.
SETTLE_WINDOW = 4
SETTLE_SHARE = 0.25
PROBE_STEPS = 32
PROBE_SHARE = 0.1


def settled_step_time(times: list[float]) -> float | None:
    """The median of the last SETTLE_WINDOW step times once they agree with the window before
    them (the slow first steps behind), else None: time another step."""
    if len(times) < 2 * SETTLE_WINDOW:
        return None
    last = float(np.median(times[-SETTLE_WINDOW:]))
    before = float(np.median(times[-2 * SETTLE_WINDOW : -SETTLE_WINDOW]))
    return last if abs(before - last) <= SETTLE_SHARE * last else None


def timed_step_count(
    draft: DFlashDraftModel,
    target: LoadedModel,
    usable: list[Sample],
    st: TrainSettings,
    log=print,
) -> int:
    """The step count that fills `st.minutes`: forward+backward passes timed (own RNG,
    gradients dropped) before the schedule starts, so the run equals `--steps total`; timed
    until their times settle (SETTLE_WINDOW), since a run's first steps are not its steps."""
    probe_rng = np.random.default_rng(st.seed + 1)
    block = draft.config.block_size
    cuda = target.device.type == "cuda"
    times: list[float] = []
    per_step: float | None = None
    while per_step is None:
        t0 = time.perf_counter()
        samples, anchors = draw(usable, st.seqs_per_step, block, st.anchors, probe_rng)
        step_loss(draft, target, samples, anchors, st.gamma, st.blocks_per_row, st.attention)[
            0
        ].backward()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        per_step = settled_step_time(times)
        if per_step is None and (
            len(times) >= PROBE_STEPS or sum(times) >= PROBE_SHARE * st.minutes * 60
        ):
            per_step = float(np.median(times[-SETTLE_WINDOW:]))  # unsettled: the latest
    draft.zero_grad(set_to_none=True)
    per_step *= 1.05  # + the optimizer step
    total = max(4, int((st.minutes * 60 - sum(times)) / per_step))
    log(f"train: ~{per_step:.2f} s/step ({len(times)} timed) -> {total} steps in {st.minutes} min")
    return total


def run_identity(st: TrainSettings, draft: DFlashDraftModel, data: list[Sample]) -> dict:
    """What a resumed run must share with the run it continues: the settings (but `minutes`,
    which only chose the step count the checkpoint records), the drafter's shape and the data;
    as JSON keeps it (tuples as lists), the form the checkpoint stores and a resume compares."""
    digest = hashlib.sha256()
    for s in data:
        digest.update(np.asarray(s.tokens, dtype=np.int64).tobytes())
        digest.update(str(s.prompt_len).encode())
    cfg = {k: v for k, v in asdict(draft.config).items() if k != "training"}
    settings = {k: v for k, v in asdict(st).items() if k not in ("minutes", "steps")}
    ident = {"settings": settings, "drafter": cfg, "data": digest.hexdigest()[:16]}
    return json.loads(json.dumps(ident))


def _differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The settings that differ between a checkpoint's run and this one, as `part.name`."""
    out = []
    for part in sorted(set(saved) | set(now)):
        a, b = saved.get(part), now.get(part)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{part}.{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif a != b:
            out.append(part)
    return out


def _resume(
    control: RunControl,
    draft: DFlashDraftModel,
    opt: torch.optim.Optimizer,
    ident: dict,
    st: TrainSettings,
    log,
) -> dict[str, Any] | None:
    """The checkpoint's meta after loading its state into `draft` and `opt` (None unless
    resuming, or where no checkpoint was written yet: a call stopped while generating, so that
    one command line repeated until it exits 0 runs a whole run); a checkpoint of other
    settings or another step count is one clear error."""
    if not control.resume or control.folder is None:
        return None
    if not control.folder.is_dir():
        log(f"train: --resume: no checkpoint in {control.folder} yet, starting at step 0")
        return None
    saved = read_meta(control.folder)
    differ = _differences(saved["ident"], ident)
    if differ:
        raise ValueError(
            f"--resume: the checkpoint in {control.folder} is of a run with other settings "
            f"({', '.join(differ)}); pass the same flags, or a new --out"
        )
    if st.steps is not None and st.steps != saved["total"]:
        raise ValueError(
            f"--resume: the checkpoint is of a {saved['total']}-step run, not --steps {st.steps}"
        )
    return load_training(control.folder, draft, opt)


def _save(
    control: RunControl,
    draft: DFlashDraftModel,
    opt: torch.optim.Optimizer,
    ident: dict,
    step: int,
    tally: Tally,
    rng: np.random.Generator,
) -> None:
    """A checkpoint after (1-based) `step`: everything the next step depends on."""
    meta = {
        "ident": ident,
        "step": step,
        "total": tally.total,
        "numpy_rng": rng.bit_generator.state,
        "tally": tally.state(),
    }
    save_training(control.folder, draft, opt, meta)


def _steps(
    draft: DFlashDraftModel,
    target: LoadedModel,
    opt: torch.optim.Optimizer,
    usable: list[Sample],
    held: list[Sample],
    st: TrainSettings,
    state: tuple[int, np.random.Generator, Tally],
    control: RunControl,
    ident: dict,
    log,
) -> None:
    """Steps `start`..total-1 of the run: optimise, record, check held-out, checkpoint, stop."""
    start, rng, tally = state
    params = [p for g in opt.param_groups for p in g["params"]]
    every = st.validate_every or max(1, tally.total // 10)
    saved_at = time.perf_counter()
    for step in range(start, tally.total):
        tally.start()
        lr = learning_rate(st, step, tally.total)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        samples, anchors = draw(usable, st.seqs_per_step, draft.config.block_size, st.anchors, rng)
        loss, acc, tokens = step_loss(
            draft, target, samples, anchors, st.gamma, st.blocks_per_row, st.attention
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, st.clip)
        opt.step()
        tally.record(step, loss, acc, lr, tokens, st.log_every, log)  # read every log_every
        if held and ((step + 1) % every == 0 or step + 1 == tally.total):
            tally.settle()
            vp = validation_point(draft, target, held, st)
            tally.validation.append({"step": step + 1, **vp})
            log(f"held-out: {tally.validation[-1]}")
        due = control.every_s > 0 and time.perf_counter() - saved_at >= control.every_s
        stop = control.past_stop() and step + 1 < tally.total
        if control.folder is not None and (due or stop or step + 1 == tally.total):
            _save(control, draft, opt, ident, step + 1, tally, rng)
            saved_at = time.perf_counter()
        if stop:
            raise Stopped(
                f"training: step {step + 1} of {tally.total}, checkpoint in {control.folder}"
            )


def train(
    draft: DFlashDraftModel,
    target: LoadedModel,
    data: list[Sample],
    st: TrainSettings,
    log=print,
    held_out: list[Sample] | None = None,
    control: RunControl | None = None,
) -> dict[str, Any]:
    """Train in place (continuing the checkpoint in `control.folder` when `control.resume`);
    returns the history (loss per logged step with tokens/s, per-slot accuracy, timing, and
    the held-out loss/accuracy/tau_sim at regular steps when `held_out` sequences are given).
    Raises Stopped, after a checkpoint, when `control.stop_at` passes before the last step."""
    control = control or RunControl()
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
    held = [s for s in held_out or [] if len(s.tokens) - s.prompt_len > block]
    draft.train()
    ident = run_identity(st, draft, usable + held)
    meta = _resume(control, draft, opt, ident, st, log)
    if meta is not None:
        rng.bit_generator.state = meta["numpy_rng"]
        state = (meta["step"], rng, Tally.from_state(meta["tally"]))
        log(f"train: resumed at step {meta['step']} of {meta['total']} from {control.folder}")
    else:
        total = (
            st.steps if st.steps is not None else timed_step_count(draft, target, usable, st, log)
        )
        state = (0, rng, Tally(block - 1, total))
    _steps(draft, target, opt, usable, held, st, state, control, ident, log)
    draft.eval()
    return state[2].history()
