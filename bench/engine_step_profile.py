"""Where a captured step's time goes (CUDA): graph replay alone vs the whole serving step, and the
kernels of one step (count, GPU time by kernel name) from torch.profiler. A decode step (one
token), or with `--nodes Q` a verify step of a Q-node tree (DDTree's budget + 1: where the
H100's 17-node DFlash verify took 1.28 ms against plain's 0.77, docs/dflash.md), optionally
writing the tapped layers a DFlash drafter reads (`--taps`).

    python3 bench/engine_step_profile.py --batch 1 --context 256
    python3 bench/engine_step_profile.py --context 512 --nodes 17 --taps 1,8,14,20,27
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

from specscope.backend import SamplingParams
from specscope.engine.backend import EngineBackend
from specscope.engine.cuda.graph_runner import CudaGraphRunner
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import random_model
from specscope.engine.runner import Work


def random_tree(q: int, seed: int = 0) -> tuple[np.ndarray, list[int]]:
    """A Q-node tree (node 0 the root, each node's parent an earlier node): the verify mask
    (mask[j, i]: node j sees node i, an ancestor; the diagonal implied) and each node's depth."""
    rng = np.random.default_rng(seed)
    parent = [-1] + [int(rng.integers(0, j)) for j in range(1, q)]
    mask = np.zeros((q, q), dtype=bool)
    depth = [0] * q
    for j in range(1, q):
        depth[j] = depth[parent[j]] + 1
        mask[j] = mask[parent[j]]
        mask[j, parent[j]] = True
    return mask, depth


def verify_steps(runner: CudaGraphRunner, be: EngineBackend, rid: str, q: int) -> list[float]:
    """Milliseconds of verify forwards of a Q-node tree over the request's context (its rows
    handed back after each, so every forward sees the same context)."""
    seq = be.requests[rid].seq
    ctx = seq.context_len
    mask, depth = random_tree(q)
    work = [Work(seq, [7] * q, positions=[ctx + d for d in depth], mask=mask)]
    times = []
    for _ in range(55):
        t0 = time.perf_counter()
        _, logits = runner.forward(work)
        logits.argmax()  # the step's one read back, as the speculative stepper's
        times.append((time.perf_counter() - t0) * 1e3)
        be.kv.truncate(seq, ctx)
    return times[5:]


def replay_ms(runner: CudaGraphRunner, bucket: int, q: int) -> float:
    graph = runner._graph(bucket, q)[0]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(100):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 100


def print_kernels(runner: CudaGraphRunner, bucket: int, q: int) -> None:
    """One step run eagerly under the profiler: kernels by name, most GPU time first."""
    from torch.profiler import ProfilerActivity, profile

    inp = runner._inputs[q][:bucket]
    with torch.inference_mode():
        runner._step(inp, q)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            runner._step(inp, q)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-gemv", action="store_true", help="cuBLAS matmuls at one token too")
    ap.add_argument("--nodes", type=int, default=1, help="profile a verify of this many nodes")
    ap.add_argument("--taps", default="", help="comma list of tapped layers (DFlash's verify)")
    args = ap.parse_args()
    taps = tuple(int(t) for t in args.taps.split(",") if t)
    lm = random_model(device="cuda")
    kv = KVCache.for_model(
        lm.config,
        pool_tokens=args.batch * (args.context + 300 + args.nodes),
        page_size=16,
        dtype=lm.dtype,
        device=lm.device,
    )
    runner = CudaGraphRunner(
        lm.model,
        kv,
        max_batch=args.batch,
        max_nodes=args.nodes,
        compile=not args.no_compile,
        gemv=not args.no_gemv,
        taps=taps,
    )
    runner.warmup()
    be = EngineBackend(lm, kv, runner=runner, max_batch=args.batch)
    ids = [f"r{i}" for i in range(args.batch)]
    params = SamplingParams(max_tokens=250, ignore_eos=True)
    be.prefill_many_sync([(r, [7] * args.context, params) for r in ids])
    for _ in range(5):
        be.step_sync(ids)
    bucket = runner.buckets[0] if args.batch == 1 else args.batch
    setting = f"compile={not args.no_compile} gemv={not args.no_gemv} taps={taps or 'none'}"
    steps = [be.step_sync(ids).step_s * 1e3 for _ in range(50)]
    print(
        f"decode: batch {args.batch} ctx {args.context} {setting}: step "
        f"{statistics.median(steps):.3f} ms median, graph replay alone "
        f"{replay_ms(runner, bucket, 1):.3f} ms"
    )
    q = args.nodes
    if q > 1:
        verify = verify_steps(runner, be, ids[0], q)
        ctx = be.requests[ids[0]].seq.context_len
        print(
            f"verify of {q} nodes (batch 1, ctx {ctx}): forward "
            f"{statistics.median(verify):.3f} ms median, graph replay alone "
            f"{replay_ms(runner, runner.buckets[0], q):.3f} ms, "
            f"{statistics.median(verify) / statistics.median(steps):.2f}x the decode step"
        )
        print_kernels(runner, runner.buckets[0], q)
    else:
        print_kernels(runner, bucket, 1)


if __name__ == "__main__":
    main()
