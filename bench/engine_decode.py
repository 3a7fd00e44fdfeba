"""Plain decode speed of specscope's engine vs transformers' `generate` and the memory floor,
same weights, device and run, at every (batch, context) pair asked for.

- engine: `EngineBackend.step_sync` over the whole batch (the serving path: on `--device cuda`
  the paged attention kernel + a CUDA graph per batch bucket; `--eager` for the eager path);
- transformers: `LlamaForCausalLM.generate` on a model holding OUR tensors, the batch of prompts
  at once, timed per step by a logits processor that stamps the clock once per new token;
- floor: the bytes one decode step must read (the weights once, plus every request's K/V)
  over the device's copy bandwidth, measured here in the same run.
Figures: median step time over --steps steps, tok/s = batch / step time, and their ratios.
`--temperature T`: each point's engine steps again with every request sampled at T (the
trainer's sampled responses, `--response-temperature`), and the sampled / greedy step ratio.

    .venv/bin/python bench/engine_decode.py --batches 1,4 --contexts 256,1024   # CPU, SmolLM2
    python3 bench/engine_decode.py --device cuda --random-weights   # batch 1/32/256 x ctx 256/2048/8192
    python3 bench/engine_decode.py --device cuda --skip-hf --batches 256 --contexts 512 --temperature 1
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from specscope.backend import SamplingParams
from specscope.engine.factory import assemble
from specscope.engine.hf_reference import hf_llama_from
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import LoadedModel, load_model, random_model
from specscope.engine.options import EngineOptions


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def copy_bandwidth(device: torch.device) -> float:
    """Bytes/s of a large device-to-device copy (read + write), the floor's denominator."""
    n = (1 << 28) if device.type == "cuda" else (1 << 25)
    a = torch.empty(n, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    sync(device)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        b.copy_(a)
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * a.numel() * a.element_size() / min(times)


def floor_s(lm: LoadedModel, batch: int, ctx: int, bandwidth: float) -> float:
    cfg = lm.config
    elt = torch.finfo(lm.dtype).bits // 8
    weights = sum(p.numel() for p in lm.model.parameters()) * elt
    kv = batch * ctx * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * elt
    return (weights + kv) / bandwidth


def engine_steps(
    backend, batch: int, prompts: list[list[int]], steps: int, temperature: float = 0.0
) -> list[float]:
    ids = [f"r{i}" for i in range(batch)]
    backend.prefill_many_sync(
        [
            (
                rid,
                p,
                SamplingParams(
                    max_tokens=steps + 2, temperature=temperature, seed=i, ignore_eos=True
                ),
            )
            for i, (rid, p) in enumerate(zip(ids, prompts, strict=True))
        ]
    )
    times = []
    for _ in range(steps):
        times.append(backend.step_sync(ids).step_s)
    for rid in ids:
        backend.release(rid)
    return times


def hf_steps(hf, prompts: list[list[int]], steps: int, device: torch.device) -> list[float]:
    import transformers

    stamps: list[float] = []

    class Stamp(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            sync(device)
            stamps.append(time.perf_counter())
            return scores

    ids = torch.tensor(prompts, device=device)
    with torch.inference_mode():
        hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=steps + 1,
            min_new_tokens=steps + 1,
            do_sample=False,
            pad_token_id=0,
            logits_processor=transformers.LogitsProcessorList([Stamp()]),
        )
    return [b - a for a, b in itertools.pairwise(stamps)]  # the first stamp ends prefill


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument(
        "--random-weights", action="store_true", help="SmolLM2 architecture, random weights"
    )
    ap.add_argument("--batches", default=None, help="comma list (cuda 1,32,256; cpu 1,4)")
    ap.add_argument(
        "--contexts", default=None, help="comma list (cuda 256,2048,8192; cpu 256,1024)"
    )
    ap.add_argument(
        "--steps", type=int, default=None, help="decode steps per point (cpu 8, cuda 32)"
    )
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--kv-alloc", default="contiguous", choices=["contiguous", "scattered"])
    ap.add_argument(
        "--eager", action="store_true", help="engine without CUDA graphs / paged kernel"
    )
    ap.add_argument("--no-compile", action="store_true", help="CUDA graphs without torch.compile")
    ap.add_argument("--no-gemv", action="store_true", help="cuBLAS matmuls for one-token steps too")
    ap.add_argument(
        "--hf-max-tokens",
        type=int,
        default=1 << 19,
        help="skip transformers where batch x context exceeds this (its prefill and cache)",
    )
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument(
        "--temperature", type=float, default=0.0, help="also time the steps sampled at this T"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (a busy box: 1)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    batches = [int(x) for x in (args.batches or ("1,32,256" if cuda else "1,4")).split(",")]
    contexts = [
        int(x) for x in (args.contexts or ("256,2048,8192" if cuda else "256,1024")).split(",")
    ]
    steps = args.steps or (32 if cuda else 8)
    lm = (
        random_model(device=args.device)
        if args.random_weights
        else load_model(args.model, args.device)
    )
    weights = "random (SmolLM2 architecture)" if args.random_weights else lm.name
    cfg = lm.config
    rows = max(batches) * (max(contexts) + steps + 2 * args.page_size + 4)
    kv = KVCache.for_model(
        cfg,
        pool_tokens=rows,
        page_size=args.page_size,
        policy=args.kv_alloc,
        dtype=lm.dtype,
        device=lm.device,
    )
    t0 = time.perf_counter()
    opts = EngineOptions(
        device=args.device,
        page_size=args.page_size,
        kv_alloc=args.kv_alloc,
        max_batch=max(batches),
        cuda_graphs=not args.eager,
        torch_compile=not args.no_compile,
        single_token_gemv=not args.no_gemv,
    )
    backend = assemble(lm, kv, opts)
    setup_s = time.perf_counter() - t0
    bandwidth = copy_bandwidth(lm.device)
    print(
        f"device={lm.device} ({torch.cuda.get_device_name() if cuda else 'cpu'}) dtype={lm.dtype} "
        f"weights={weights} engine path={backend.info.extra['fast_path']} page={args.page_size} "
        f"{args.kv_alloc} steps/point={steps} torch={torch.__version__} setup={setup_s:.1f}s "
        f"copy bandwidth={bandwidth / 1e9:.0f} GB/s",
        flush=True,
    )
    hf = None if args.skip_hf else hf_llama_from(lm)
    gen = torch.Generator().manual_seed(0)
    engine_steps(backend, 1, [[5] * 32], 3)  # warm-up outside the timings
    if hf is not None:
        hf_steps(hf, [[5] * 32], 3, lm.device)
    print(
        f"{'batch':>5} {'ctx':>5} | {'engine ms':>9} {'tok/s':>9} | {'hf ms':>8} {'tok/s':>8} | "
        f"{'floor ms':>8} {'tok/s':>9} | {'eng/hf':>6} {'floor/eng':>9}"
    )
    out = []
    for batch, wanted in itertools.product(batches, contexts):
        ctx = min(wanted, backend.max_context - steps - 2)  # the context the last step sees
        prompts = [
            torch.randint(100, cfg.vocab_size, (ctx,), generator=gen).tolist() for _ in range(batch)
        ]
        ours = statistics.median(engine_steps(backend, batch, prompts, steps))
        theirs = None
        if hf is not None and batch * ctx <= args.hf_max_tokens:
            theirs = statistics.median(hf_steps(hf, prompts, min(steps, 16), lm.device))
        floor = floor_s(lm, batch, ctx, bandwidth)
        sampled = (
            statistics.median(engine_steps(backend, batch, prompts, steps, args.temperature))
            if args.temperature > 0
            else None
        )
        row = {
            "batch": batch,
            "context": ctx,
            "engine_step_ms": ours * 1e3,
            "engine_tok_s": batch / ours,
            "hf_step_ms": theirs * 1e3 if theirs else None,
            "hf_tok_s": batch / theirs if theirs else None,
            "floor_step_ms": floor * 1e3,
            "floor_tok_s": batch / floor,
            "sampled_step_ms": sampled * 1e3 if sampled else None,
            "sampled_over_greedy": sampled / ours if sampled else None,
        }
        out.append(row)
        hf_cols = (
            f"{row['hf_step_ms']:>8.2f} {row['hf_tok_s']:>8.0f}"
            if theirs
            else f"{'skipped':>8} {'':>8}"
        )
        ratio = f"{theirs / ours:>6.1f}" if theirs else f"{'':>6}"
        print(
            f"{batch:>5} {ctx:>5} | {row['engine_step_ms']:>9.3f} {row['engine_tok_s']:>9.0f} | {hf_cols} | "
            f"{row['floor_step_ms']:>8.3f} {row['floor_tok_s']:>9.0f} | {ratio} {ours / floor:>9.1f}"
            + (
                f" | sampled {sampled * 1e3:.3f} ms, {sampled / ours:.2f}x greedy"
                if sampled
                else ""
            ),
            flush=True,
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "device": str(lm.device),
                    "weights": weights,
                    "temperature": args.temperature,
                    "rows": out,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
