"""Where a single prefill's time goes (issue #38): wall time per prefill of the same and of new
prompt lengths, then torch.profiler's table over one prefill (CPU time against device time,
kernel launches, the attention path taken). The H200 figure in ARCHITECTURE §7.1 (64 ms of CPU
against 4.5 ms of GPU for one 257-token eager prefill, 1,599 launches, SDPA's math fallback)
came from this measurement. No thresholds: the table is the figure.

    PYTHONPATH=src python bench/engine_prefill_profile.py --device cpu [--tokens 64]
    python3 bench/engine_prefill_profile.py --device cuda
"""

from __future__ import annotations

import argparse
import time

import torch

from specscope.backend import SamplingParams
from specscope.engine.factory import build_backend

PARAMS = SamplingParams(max_tokens=4)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def prefill_ms(backend, device: str, rid: str, n: int) -> float:
    """One prefill of an n-token prompt (real-looking ids, no two prompts alike), in ms."""
    ids = [(17 + 7 * k + n) % 4000 + 20 for k in range(n)]
    _sync(device)
    t0 = time.perf_counter()
    backend.prefill_sync(rid, ids, PARAMS)
    _sync(device)
    elapsed = time.perf_counter() - t0
    backend.release(rid)
    return elapsed * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rows", type=int, default=12, help="profiler table rows")
    args = ap.parse_args()
    t0 = time.time()
    be = build_backend(model=args.model, device=args.device, max_batch=64)
    print(f"build {time.time() - t0:.1f} s")
    n = args.tokens
    same = [prefill_ms(be, args.device, f"a{i}", n) for i in range(5)]
    new = [prefill_ms(be, args.device, f"b{k}", n - 6 + k) for k in range(4)]
    print(f"{n} tokens x5, ms: {[round(x, 1) for x in same]}")
    print(f"new lengths {n - 6}..{n - 3}, ms: {[round(x, 1) for x in new]}")
    activities = [torch.profiler.ProfilerActivity.CPU]
    if args.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        prefill_ms(be, args.device, "p", n + 1)
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
