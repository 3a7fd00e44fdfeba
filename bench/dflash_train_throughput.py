"""DFlash trainer throughput: training tokens/s (anchors x (B-1) label slots a second) of the
trainer's step against the first trainer's per-sequence step, in the same run.

Both do forward + backward + clip + AdamW step on the same draws of a random target: the new
step (engine/training/loop.step_loss: every block of every sequence one batch row, the LM head
+ CE by chunks, bf16 autocast on CUDA) and the anchor (loss.block_loss once per sequence: one
packed query stream per sequence, full fp32 logits). Rounds alternate (anchor, new, anchor,
...) so load on a shared machine hits both alike; the ratio is the figure on a CPU, absolute
tokens/s only on the H200. The new step is also timed with the target's features computed
each step (one batched target forward: `--feature-cache off`, what a big corpus needs) against
the same step with cached features, and with `--draft-vocab N` over a draft vocabulary of N
tokens (train_dflash's `--draft-vocab`: the head and its CE over N rows) against the whole one.
The training loop itself (loop.train: the same step with its schedule and bookkeeping, features
per step) is timed against the bare step: the first H100 runs trained at a third of the bench's
rate, most likely because the loop read each step's loss and accuracy back before drawing the
next (it no longer does: tally.py); on a GPU this ratio says whether that was all of it.

    python bench/dflash_train_throughput.py                       # CPU, tiny random target
    python bench/dflash_train_throughput.py --device cuda --profile   # the GPU preset's shape
    python bench/dflash_train_throughput.py --shape smollm2 --draft-vocab 16384   # CPU
    python bench/dflash_train_throughput.py --device cuda --ragged --prompt 226 --response 384
        # a corpus's lengths (the first H100 run: prompts 226, responses 300 on average): on
        # CUDA also the step with cuDNN's attention kept out (train_dflash --attention no-cudnn)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from specscope.engine.loader import SMOLLM2_CONFIG, TINY_CONFIG, random_model
from specscope.engine.speculative.dflash_model import (
    DFlashConfig,
    DFlashDraftModel,
    with_draft_vocab,
)
from specscope.engine.training.dataset import Sample
from specscope.engine.training.loop import TrainSettings, draw, step_loss, train
from specscope.engine.training.loss import block_loss

OLD = "old per-sequence step (cached features)"
LOOP = "the training loop (loop.train, features per step)"


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument(
        "--shape", default=None, choices=["tiny", "smollm2"], help="default: tiny on cpu"
    )
    ap.add_argument("--seqs", type=int, default=None, help="sequences a step (cuda 8, cpu 4)")
    ap.add_argument("--anchors", type=int, default=None, help="anchors a sequence (256 / 24)")
    ap.add_argument("--block", type=int, default=None, help="block size (16 / 8)")
    ap.add_argument("--layers", type=int, default=None, help="drafter layers (2 / 1)")
    ap.add_argument("--prompt", type=int, default=400, help="prompt tokens a sequence")
    ap.add_argument("--response", type=int, default=None, help="response tokens (512 / 96)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=None, help="steps a round (cuda 10, cpu 3)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--blocks-per-row", default="16", help="comma list: the new step once per value"
    )
    ap.add_argument("--profile", action="store_true", help="then the top ops of one new step")
    ap.add_argument(
        "--ragged",
        action="store_true",
        help="sequences of varied lengths (prompt x0.5-1.5, response x0.5-1, 16 steps' worth), "
        "as a corpus gives them, instead of one length: every step's shapes differ",
    )
    ap.add_argument(
        "--draft-vocab",
        type=int,
        default=0,
        help="also the new step over a draft vocabulary of N tokens (the LM head's rows cut "
        "to N; same weights), against the whole vocabulary's",
    )
    a = ap.parse_args()
    gpu = a.device == "cuda"
    defaults = {
        "shape": "smollm2" if gpu else "tiny",
        "seqs": 8 if gpu else 4,
        "anchors": 256 if gpu else 24,
        "block": 16 if gpu else 8,
        "layers": 2 if gpu else 1,
        "response": 512 if gpu else 96,
        "steps": 10 if gpu else 3,
    }
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    return a


def _setup(a: argparse.Namespace):
    """Random target and drafter of the asked shape, and random sequences (4 steps' worth),
    with cached features and without (the same tokens)."""
    cfg = SMOLLM2_CONFIG if a.shape == "smollm2" else TINY_CONFIG
    target = random_model(
        cfg, device=a.device, dtype=torch.bfloat16 if a.device == "cuda" else torch.float32
    )
    for p in target.model.parameters():
        p.requires_grad_(False)
    dcfg = DFlashConfig.for_target(target.name, cfg, num_layers=a.layers, block_size=a.block)
    draft = DFlashDraftModel(dcfg)
    draft.init_weights(0, 0.02)
    draft.to(target.device).train()
    rng = np.random.default_rng(0)
    width = len(dcfg.target_layer_ids) * cfg.hidden_size
    count = (16 if a.ragged else 4) * a.seqs
    prompts = rng.integers(a.prompt // 2, a.prompt * 3 // 2 + 1, count) if a.ragged else [a.prompt]
    responses = rng.integers(a.response // 2, a.response + 1, count) if a.ragged else [a.response]
    cached = []
    for i in range(count):
        p, n = int(prompts[i % len(prompts)]), int(responses[i % len(responses)])
        tokens = rng.integers(0, cfg.vocab_size, p + n).tolist()
        cached.append(Sample("x", tokens, p, torch.randn(p + n, width, dtype=torch.bfloat16)))
    return target, draft, cached, [Sample(s.category, s.tokens, s.prompt_len) for s in cached]


def _old_step(draft, target, samples, anchors, gamma: float) -> None:
    for s, a in zip(samples, anchors, strict=True):
        loss, _ = block_loss(draft, target.model.embed_tokens, target.model.lm_head, s, a, gamma)
        (loss / len(samples)).backward()


def _new_step(per_row: int, attention: str = "auto"):
    def step(draft, target, samples, anchors, gamma: float) -> None:
        step_loss(draft, target, samples, anchors, gamma, per_row, attention)[0].backward()

    return step


def _round(fn, draft, target, samples, a, opt, seed: int) -> float:
    """Training tokens/s of `a.steps` steps of `fn` (+ clip + AdamW), the same draws per seed."""
    rng = np.random.default_rng(seed)
    slots = 0
    sync = torch.cuda.synchronize if a.device == "cuda" else lambda: None
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        picked, anchors = draw(samples, a.seqs, a.block, a.anchors, rng)
        opt.zero_grad(set_to_none=True)
        fn(draft, target, picked, anchors, 7.0)
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        slots += sum(map(len, anchors)) * (a.block - 1)
    sync()
    return slots / (time.perf_counter() - t0)


def _loop_round(draft, target, samples, a, per_row: int, seed: int) -> float:
    """Training tokens/s of `a.steps` steps of the training loop (loop.train, a fresh
    optimiser each round), wall time from its call to its return."""
    st = TrainSettings(
        steps=a.steps,
        lr=1e-4,
        anchors=a.anchors,
        seqs_per_step=a.seqs,
        seed=seed,
        blocks_per_row=per_row,
    )
    sync = torch.cuda.synchronize if a.device == "cuda" else lambda: None
    sync()
    t0 = time.perf_counter()
    history = train(draft, target, samples, st, log=lambda *_: None)
    sync()
    draft.train()
    return history["label_tokens"] / (time.perf_counter() - t0)


def _profile(a: argparse.Namespace, draft, target, samples, opt, per_row: int) -> None:
    """Where one new step's time goes (torch.profiler, device time on CUDA), top 15 ops."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device == "cuda" else [])
    one = argparse.Namespace(**{**vars(a), "steps": 1})
    with profile(activities=acts) as prof:
        _round(_new_step(per_row), draft, target, samples, one, opt, seed=99)
    key = "self_cuda_time_total" if a.device == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=60))


def main() -> None:
    a = _args()
    torch.set_num_threads(a.threads)
    if a.device == "cuda":
        torch.set_float32_matmul_precision("high")
    target, draft, cached, bare = _setup(a)
    opt = torch.optim.AdamW(draft.parameters(), lr=1e-4, betas=(0.9, 0.95))
    rows = [int(m) for m in a.blocks_per_row.split(",")]
    new = [f"new batched step, {m} blocks a row (cached features)" for m in rows]
    per_step = f"new batched step, {rows[0]} blocks a row (features per step)"
    steps = {OLD: (_old_step, cached, draft, opt)}
    steps.update(
        {name: (_new_step(m), cached, draft, opt) for name, m in zip(new, rows, strict=True)}
    )
    steps[per_step] = (_new_step(rows[0]), bare, draft, opt)
    no_cudnn = f"{per_step[:-1]}, attention no-cudnn)"
    if a.device == "cuda":  # cuDNN's attention builds a plan per shape (--attention no-cudnn)
        steps[no_cudnn] = (_new_step(rows[0], "no-cudnn"), bare, draft, opt)
    steps[LOOP] = (None, bare, draft, None)
    vocab = f"new batched step, {rows[0]} blocks a row, draft vocabulary {a.draft_vocab:,}"
    if a.draft_vocab:
        small = with_draft_vocab(draft, torch.arange(a.draft_vocab))  # same weights
        small_opt = torch.optim.AdamW(small.parameters(), lr=1e-4, betas=(0.9, 0.95))
        steps[vocab] = (_new_step(rows[0]), cached, small, small_opt)
    rates: dict[str, list[float]] = {k: [] for k in steps}
    peak: dict[str, float] = {}
    for r in range(a.rounds + 1):  # round 0 warms up (kernels, allocator), not counted
        for name, (fn, samples, model, optimizer) in steps.items():
            if a.device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            if fn is None:
                rate = _loop_round(model, target, samples, a, rows[0], seed=r)
            else:
                rate = _round(fn, model, target, samples, a, optimizer, seed=r)
            if r:
                rates[name].append(rate)
            if a.device == "cuda":
                peak[name] = torch.cuda.max_memory_allocated() / 2**30
    print(
        f"{a.device} {a.shape}: {a.seqs} seqs x {a.anchors} anchors x block {a.block}, "
        f"{a.layers} layer(s), {a.prompt}+{a.response} tokens{' (ragged)' if a.ragged else ''}, "
        f"{a.threads} thread(s), {a.rounds} rounds x {a.steps} steps"
    )
    for name, r in rates.items():
        mem = f", peak {peak[name]:.1f} GiB" if name in peak else ""
        print(
            f"  {name}: {statistics.median(r):,.0f} training tokens/s (median; rounds {[round(x) for x in r]}){mem}"
        )
    med = {k: statistics.median(v) for k, v in rates.items()}
    for name, m in zip(new, rows, strict=True):
        print(f"  ratio new ({m} a row) / old: {med[name] / med[OLD]:.2f}x")
    print(
        f"  ratio features per step / cached ({rows[0]} a row): {med[per_step] / med[new[0]]:.2f}x"
    )
    print(f"  ratio training loop / its step (features per step): {med[LOOP] / med[per_step]:.2f}x")
    if a.draft_vocab:
        print(
            f"  ratio draft vocabulary {a.draft_vocab:,} / whole: {med[vocab] / med[new[0]]:.2f}x"
        )
    if no_cudnn in med:
        ratio = med[no_cudnn] / med[per_step]
        print(f"  ratio attention no-cudnn / auto (features per step): {ratio:.2f}x")
    if a.profile:
        _profile(a, draft, target, bare, opt, rows[0])


if __name__ == "__main__":
    main()
