"""Where a captured decode step's time goes (CUDA): graph replay alone vs the whole serving step,
and the kernels of one step (count, GPU time by kernel name) from torch.profiler.

    python3 bench/engine_step_profile.py --batch 1 --context 256
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from specscope.backend import SamplingParams
from specscope.engine.backend import EngineBackend
from specscope.engine.cuda.graph_runner import CudaGraphRunner
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import random_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-gemv", action="store_true", help="cuBLAS matmuls at one token too")
    args = ap.parse_args()
    lm = random_model(device="cuda")
    kv = KVCache.for_model(
        lm.config,
        pool_tokens=args.batch * (args.context + 300),
        page_size=16,
        dtype=lm.dtype,
        device=lm.device,
    )
    runner = CudaGraphRunner(
        lm.model, kv, max_batch=args.batch, compile=not args.no_compile, gemv=not args.no_gemv
    )
    runner.warmup()
    be = EngineBackend(lm, kv, runner=runner, max_batch=args.batch)
    ids = [f"r{i}" for i in range(args.batch)]
    params = SamplingParams(max_tokens=250, ignore_eos=True)
    be.prefill_many_sync([(r, [7] * args.context, params) for r in ids])
    for _ in range(5):
        be.step_sync(ids)
    steps = [be.step_sync(ids).step_s * 1e3 for _ in range(50)]
    graph = runner._graph(runner.buckets[0] if args.batch == 1 else args.batch, 1)[0]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(100):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    replay_ms = start.elapsed_time(end) / 100
    print(
        f"batch {args.batch} ctx {args.context} compile={not args.no_compile} gemv={not args.no_gemv}: step "
        f"{statistics.median(steps):.3f} ms median, graph replay alone {replay_ms:.3f} ms"
    )
    inp = runner._inputs[1][: runner.buckets[0] if args.batch == 1 else args.batch]
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode():
        runner._step(inp, 1)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            runner._step(inp, 1)
            torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    total = sum(e.device_time for e in events) / 1e3
    print(f"one step run eagerly: {len(events)} kernels/copies, {total:.3f} ms of GPU time")
    by_name: dict[str, list[float]] = {}
    for e in events:
        by_name.setdefault(e.name[:70], []).append(e.device_time)
    rows = sorted(by_name.items(), key=lambda kv_: -sum(kv_[1]))
    for name, times in rows[:22]:
        print(
            f"  {len(times):>4} x {statistics.mean(times):7.2f} us = {sum(times) / 1e3:6.3f} ms  {name}"
        )


if __name__ == "__main__":
    main()
