"""The host work of one eager prefill forward (issue #38), counted, and its wall time against an
anchor measured in the same run.

Cases, each one forward through the backend's runner as `EngineBackend._prefill_chunk` runs it:
- single: one 257-token prompt, fresh (the 256 tokens before its pending one);
- group: several fresh prompts in one forward (`--group`; on a GPU `_prefill_groups` packs up
  to 16,384 tokens a forward);
- context: a 256-token chunk over 256 cached tokens (a long prompt's later chunk: masked).
Per case, torch.profiler over one forward: aten ops (every `aten::` call, nested ones included),
`aten::to` / `_to_copy` / `copy_`, host syncs (`_local_scalar_dense`: item, bool(tensor),
tolist; on CUDA also stream / device / event synchronisations), the SDPA kernel, and on CUDA
kernel launches and host-to-device copies; CPU and device ms of that traced forward; then the
median wall ms of `--repeats` untraced forwards and its ratio to the anchor, the backend's
batch-1 decode step (`step_sync`, the served path: CUDA graphs on a GPU).

Before (the path this replaced, dcfc7b5, not kept): printed beside each case from `BEFORE`.
- H200 (bench/results/engine_prefill_profile_h200.txt; real SmolLM2 bf16, one 257-token
  prefill): 64.5 ms of CPU against 4.5 ms of GPU, 1,599 kernel launches, 369 aten::to,
  277 _to_copy, 375 copy_, SDPA's math fallback (`_scaled_dot_product_attention_math`).
- This 2-core CPU (SmolLM2's shape, random weights; this script run on dcfc7b5): see `BEFORE`
  (single bf16: 7,507 aten ops, 340 aten::to, 251 copy_, 1 host sync; a per-request device
  copy of every slot list and a host-built mask behind each forward). Since (branch prefill),
  bf16: single 6,060 aten ops, 246 aten::to, 244 copy_, 0 host syncs; group 7,724 -> 6,080;
  context 7,507 -> 6,418 (the CPU's remaining casts are RMSNorm's float32 arithmetic).
The H200 row was `prefill_sync` (admission included) rather than the bare forward: the
same forward, a few host ops more. No thresholds: the counts are the figure.

    PYTHONPATH=src python bench/engine_prefill_profile.py --random --dtype bfloat16 [--json F]
    python3 bench/engine_prefill_profile.py --device cuda [--random] [--json F]   # ~1-2 min
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from specscope.backend import SamplingParams
from specscope.engine.factory import assemble
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import SMOLLM2_CONFIG, load_model, random_model
from specscope.engine.options import EngineOptions
from specscope.engine.runner import Work, extend

CASES = ("single", "group", "context")
# The replaced path's figures (one forward). "cpu" rows: this script on dcfc7b5, SmolLM2's
# shape with random weights, OMP_NUM_THREADS=1 on the shared 2-core box (wall_anchor from one
# run: the CPU's prefill is bound by its matmuls, so it barely moves); "cuda" row: the H200
# profile in bench/results/engine_prefill_profile_h200.txt (real weights, bf16).
BEFORE = {
    ("cpu", "bfloat16", "single"): dict(
        aten_ops=7507, to=340, to_copy=244, copy=251, syncs=1, wall_anchor=2.69
    ),
    ("cpu", "bfloat16", "group"): dict(
        aten_ops=7724, to=352, to_copy=244, copy=275, syncs=1, wall_anchor=14.83
    ),
    ("cpu", "bfloat16", "context"): dict(
        aten_ops=7507, to=341, to_copy=244, copy=251, syncs=1, wall_anchor=3.06
    ),
    ("cpu", "float32", "single"): dict(
        aten_ops=7047, to=339, to_copy=121, copy=128, syncs=1, wall_anchor=9.76
    ),
    ("cpu", "float32", "group"): dict(
        aten_ops=7264, to=351, to_copy=121, copy=152, syncs=1, wall_anchor=46.23
    ),
    ("cpu", "float32", "context"): dict(
        aten_ops=7047, to=340, to_copy=121, copy=128, syncs=1, wall_anchor=10.83
    ),
    ("cuda", "bfloat16", "single"): dict(
        to=369, to_copy=277, copy=375, launches=1599, cpu_ms=64.5, device_ms=4.45
    ),
}
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _prompt(n: int, salt: int) -> list[int]:
    """Real-looking ids, no two prompts alike."""
    return [(17 + 7 * k + salt) % 4000 + 20 for k in range(n)]


def prepare(backend, case: str, group: list[int], salt: int) -> list[Work]:
    """The case's requests admitted (and the context case's context prefilled), unforwarded."""
    kv = backend.kv
    lengths = group if case == "group" else [256]
    work = []
    for i, n in enumerate(lengths):
        seq = kv.admit(f"{case}-{salt}-{i}", n + 512)
        if case == "context":
            extend(backend.runner, [Work(seq, _prompt(256, salt + 1))], want_logits=False)
        work.append(Work(seq, _prompt(n, salt + i)))
    return work


def forward_once(backend, work: list[Work]) -> float:
    """The prefill forward (as `_prefill_chunk` without taps), synchronised: seconds."""
    device = backend.kv.device
    _sync(device)
    t0 = time.perf_counter()
    extend(backend.runner, work, want_logits=False)
    _sync(device)
    return time.perf_counter() - t0


def release(backend, work: list[Work]) -> None:
    for w in work:
        backend.kv.release(w.seq.request_id)


def counts(prof) -> dict:
    """The profile's figures for one forward (see the module docstring)."""
    ev = {e.key: e for e in prof.key_averages()}
    n = {k: e.count for k, e in ev.items()}
    out = {
        "aten_ops": sum(c for k, c in n.items() if k.startswith("aten::")),
        "to": n.get("aten::to", 0),
        "to_copy": n.get("aten::_to_copy", 0),
        "copy": n.get("aten::copy_", 0),
        "syncs": n.get("aten::_local_scalar_dense", 0) + sum(n.get(k, 0) for k in SYNCS),
        "sdpa": sorted(k for k in n if k.startswith("aten::_scaled_dot_product")),
        "cpu_ms": sum(e.self_cpu_time_total for e in ev.values()) / 1e3,
    }
    if any("LaunchKernel" in k for k in n):  # CUDA
        out["launches"] = sum(c for k, c in n.items() if "LaunchKernel" in k)
        out["h2d_copies"] = sum(c for k, c in n.items() if k.startswith("Memcpy HtoD"))
        out["device_ms"] = sum(getattr(e, "self_device_time_total", 0) for e in ev.values()) / 1e3
    return out


def anchor_ms(backend, steps: int) -> float:
    """Median ms of the backend's batch-1 decode step (the served path)."""
    params = SamplingParams(max_tokens=steps + 4, ignore_eos=True)
    backend.prefill_sync("anchor", _prompt(32, 99), params)
    backend.step_sync(["anchor"])  # warm
    times = []
    for _ in range(steps):
        _sync(backend.kv.device)
        t0 = time.perf_counter()
        backend.step_sync(["anchor"])
        _sync(backend.kv.device)
        times.append(time.perf_counter() - t0)
    backend.release("anchor")
    return statistics.median(times) * 1e3


def measure(backend, case: str, args) -> dict:
    """One warm forward, one traced, then `--repeats` timed: the case's row."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if backend.kv.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    for salt, traced in ((0, False), (1, True)):
        work = prepare(backend, case, args.group, salt)
        if traced:
            with torch.profiler.profile(activities=activities) as prof:
                forward_once(backend, work)
        else:
            forward_once(backend, work)
        release(backend, work)
    times = []
    for k in range(args.repeats):
        work = prepare(backend, case, args.group, 10 + k)
        times.append(forward_once(backend, work))
        release(backend, work)
    tokens = sum(args.group) if case == "group" else 256
    return {
        "case": case,
        "tokens": tokens,
        **counts(prof),
        "wall_ms": statistics.median(times) * 1e3,
    }


def build(args):
    """The backend: real SmolLM2 (or its shape with random weights), as served (on a GPU the
    CUDA-graph runner, whose eager fallback runs the prefill)."""
    dtype = getattr(torch, args.dtype) if args.dtype else None
    if args.random:
        lm = random_model(SMOLLM2_CONFIG, device=args.device, dtype=dtype)
    else:
        lm = load_model(args.model, device=args.device, dtype=dtype)
    kv = KVCache.for_model(
        lm.config, pool_tokens=32768, page_size=16, dtype=lm.dtype, device=lm.device
    )
    # max_batch: the group's requests hold the device block table's rows at once; no more, so
    # that a GPU captures (and compiles) the decode graphs of few batch buckets
    opts = EngineOptions(model=args.model, device=args.device, max_batch=len(args.group))
    return assemble(lm, kv, opts)


def report(rows: list[dict], anchor: float, device: str, dtype: str) -> None:
    keys = ("aten_ops", "to", "to_copy", "copy", "syncs", "launches", "h2d_copies")
    keys += ("cpu_ms", "device_ms", "wall_ms", "wall_anchor")
    print(f"anchor (batch-1 decode step): {anchor:.2f} ms")
    for row in rows:
        print(f"\n{row['case']} ({row['tokens']} tokens), SDPA kernel: {', '.join(row['sdpa'])}")
        before = BEFORE.get((device, dtype, row["case"]), {})
        for key in keys:
            if key in row or key in before:
                now = row.get(key, "-")
                now = f"{now:.1f}" if isinstance(now, float) else now
                print(f"  {key:<11} now {now:>9}   before {before.get(key, '-'):>9}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--random", action="store_true", help="SmolLM2's shape, random weights")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    ap.add_argument("--group", type=int, nargs="+", default=[256, 200, 128, 64, 17])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    t0 = time.time()
    backend = build(args)
    dtype = str(backend.lm.dtype).removeprefix("torch.")
    print(f"build {time.time() - t0:.1f} s, {args.device} {dtype}, {backend.lm.name}")
    rows = [measure(backend, case, args) for case in args.cases]
    anchor = anchor_ms(backend, max(5, args.repeats))
    for row in rows:
        row["wall_anchor"] = round(row["wall_ms"] / anchor, 2)
    report(rows, anchor, args.device, dtype)
    if args.json:
        out = {"device": args.device, "dtype": dtype, "model": backend.lm.name}
        out |= {"anchor_ms": anchor, "rows": rows}
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
