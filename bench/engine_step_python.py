"""The engine's own host (Python) time per decode step, at batch 1 / 64 / 256, against an
anchor measured in the same run: the model's work for the same batch without the engine's
bookkeeping.

Why: on an H200 at batch 256 the engine thread's Python came to ~10 ms a step against ~3 ms of
GPU work (docs/ARCHITECTURE.md §7.1): per-request `accept_tokens`, `KVCache._new_page`, the
graph replay's staging. A tiny random-weights model keeps the compute small, so that
bookkeeping shows on a CPU too.

Per batch: prefill `--context` (+ 0..page_size-1, staggered) tokens per request, warm up, then
time `--steps` calls of `EngineBackend.step_sync` over the whole batch (the serving path; with
`--device cuda` the CUDA-graph runner unless `--eager`). The anchor is, on the eager path,
`Transformer.forward_taps` + argmax on one pre-packed batch of the same requests (their real
contexts; writes go to the pool's scratch slot), and on the graph path one replay of the batch's
captured graph. Reported (medians over the steps): step ms; model ms, the time inside the
model's forward within each step (eager path only); anchor ms; host ms = step - model time of
the same step (eager), or step - anchor (graphs: the replay is asynchronous, so the anchor
stands for the GPU work); host us per request; step / anchor; then the same requests stepped
overlapped (engine/overlap.py: each step launched before the one in flight is finished), ms per
step over the run, and its ratio to the anchor.
`--profile N` runs the timed steps under cProfile and prints the N costliest functions (own time).

    PYTHONPATH=src .venv/bin/python bench/engine_step_python.py            # CPU, tiny model
    PYTHONPATH=src .venv/bin/python bench/engine_step_python.py --profile 15 --batches 256
    python3 bench/engine_step_python.py --device cuda --model-shape smollm2   # H200
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from specscope.backend import SamplingParams
from specscope.engine.factory import assemble
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import SMOLLM2_CONFIG, TINY_CONFIG, random_model
from specscope.engine.model import ForwardBatch, NewTokens
from specscope.engine.options import EngineOptions

SHAPES = {"tiny": TINY_CONFIG, "smollm2": SMOLLM2_CONFIG}


def sync(device: torch.device) -> None:
    """Wait for queued device work, so a host clock reading covers it (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls of fn(), the device synchronised on both sides."""
    out = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t0)
    return out


def eager_anchor(backend, ids: list[str]):
    """The model's forward + argmax over the batch's real contexts, packed once up front: what
    a step costs without the engine's per-step bookkeeping (the new K/V go to the scratch slot)."""
    kv, model = backend.kv, backend.lm.model
    pad = [kv.pad_slot]
    items = []
    for rid in ids:
        req = backend.requests[rid]
        ctx = kv.context_slots(req.seq)
        items.append(NewTokens([req.tokens[-1]], [req.seq.context_len], pad, ctx))
    batch = ForwardBatch.pack(items, kv.device, kv.pad_slot)

    def run() -> None:
        logits, _ = model.forward_taps(batch, kv, (), compute_logits=True)
        logits.argmax(dim=-1).tolist()

    return run


def graph_anchor(backend, batch: int):
    """One replay of the captured decode graph of the batch's bucket (its inputs as the last
    step left them: it rewrites that step's K/V with the same values)."""
    runner = backend.runner
    bucket = next(b for b in runner.buckets if b >= batch)
    graph = runner._graph(bucket, 1)[0]
    return graph.replay


class ModelClock:
    """Seconds spent inside the model's forward during a step (eager path: the forward runs on
    the host's clock, synchronised on CUDA), so host time = step - model time of the same step,
    immune to the box's load drifting between the steps and a separate anchor run."""

    def __init__(self, model, device: torch.device):
        self.model, self.device, self.seconds = model, device, 0.0
        self._inner = model.forward_taps

    def __enter__(self) -> ModelClock:
        def clocked(*a, **kw):
            sync(self.device)
            t0 = time.perf_counter()
            try:
                return self._inner(*a, **kw)
            finally:
                sync(self.device)
                self.seconds += time.perf_counter() - t0

        self.model.forward_taps = clocked
        return self

    def __exit__(self, *exc) -> None:
        del self.model.forward_taps  # back to the class's method


def timed_steps(backend, ids: list[str], steps: int, graphs: bool) -> tuple[list, list]:
    """(step seconds, model seconds within each step; empty on the graph path)."""
    device, step_s, model_s = backend.kv.device, [], []
    if graphs:
        return timed(lambda: backend.step_sync(ids), device, steps), []
    with ModelClock(backend.lm.model, device) as clock:
        for _ in range(steps):
            clock.seconds = 0.0
            step_s.append(timed(lambda: backend.step_sync(ids), device, 1)[0])
            model_s.append(clock.seconds)
    return step_s, model_s


def overlapped_steps(backend, ids: list[str], steps: int) -> list[float]:
    """Seconds of each pass when each step is launched before the one in flight is finished
    (engine/overlap.py, as serve's step loop drives it: launch n + 1, finish n). Once the
    device sets the pace a pass lasts one step, so their median compares with the synchronous
    steps' (the median, like theirs: on a shared CPU the mean carries the preemptions). The
    step alone minus this is what the overlap can save a server."""
    device = backend.kv.device
    sync(device)
    in_flight = backend.launch_sync(ids, None)
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        launched = backend.launch_sync(ids, in_flight)
        backend.finish_sync(in_flight)
        in_flight = launched
        out.append(time.perf_counter() - t0)
    backend.finish_sync(in_flight)
    sync(device)
    return out


def measure(backend, batch: int, args, profiler: cProfile.Profile | None) -> dict:
    """Prefill `batch` requests, time the decode steps and the anchor; release them."""
    gen = torch.Generator().manual_seed(batch)
    vocab = backend.lm.config.vocab_size
    # Staggered lengths, as a server's requests are: each step some of them start a new KV page
    # (equal lengths would put every page change into one step in page_size, which a median hides).
    lengths = [args.context + i % args.page_size for i in range(batch)]
    prompts = [torch.randint(1, vocab, (n,), generator=gen).tolist() for n in lengths]
    params = SamplingParams(max_tokens=args.warmup + 2 * args.steps + 4, ignore_eos=True)
    ids = [f"b{batch}-r{i}" for i in range(batch)]
    backend.prefill_many_sync([(rid, p, params) for rid, p in zip(ids, prompts, strict=True)])
    for _ in range(args.warmup):
        backend.step_sync(ids)
    graphs = type(backend.runner).__name__ == "CudaGraphRunner"
    if profiler is not None:
        profiler.enable()
    steps, in_model = timed_steps(backend, ids, args.steps, graphs)
    if profiler is not None:
        profiler.disable()
    anchor_fn = graph_anchor(backend, batch) if graphs else eager_anchor(backend, ids)
    with torch.inference_mode():
        anchor = timed(anchor_fn, backend.kv.device, args.steps)
    overlapped = statistics.median(overlapped_steps(backend, ids, args.steps))
    for rid in ids:
        backend.release(rid)
    step_ms, anchor_ms = statistics.median(steps) * 1e3, statistics.median(anchor) * 1e3
    # Host time: the step minus its own model time (eager), or minus the replay alone (graphs).
    host = [s - m for s, m in zip(steps, in_model, strict=True)] if in_model else None
    host_ms = statistics.median(host) * 1e3 if host else step_ms - anchor_ms
    return {
        "batch": batch,
        "step_ms": step_ms,
        "model_ms": statistics.median(in_model) * 1e3 if in_model else None,
        "anchor_ms": anchor_ms,
        "host_ms": host_ms,
        "host_us_per_request": host_ms * 1e3 / batch,
        "step_over_anchor": step_ms / anchor_ms,
        "overlapped_step_ms": overlapped * 1e3,
        "overlapped_over_anchor": overlapped * 1e3 / anchor_ms,
    }


def build(args):
    """The backend the bench steps: random weights, a pool sized like serve's on the GPU."""
    lm = random_model(SHAPES[args.model_shape], device=args.device, seed=0)
    page = args.page_size
    kv = KVCache.for_model(
        lm.config,
        pool_tokens=args.pool_tokens // page * page or page,
        page_size=page,
        policy=args.kv_alloc,
        dtype=lm.dtype,
        device=lm.device,
    )
    opts = EngineOptions(
        device=args.device,
        page_size=page,
        kv_alloc=args.kv_alloc,
        max_batch=max(args.batch_list),
        cuda_graphs=not args.eager,
        torch_compile=not args.no_compile,
        overlap=True,  # for the overlapped column; step_sync is unchanged by it
    )
    return assemble(lm, kv, opts)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model-shape", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--batches", default="1,64,256", help="comma list")
    ap.add_argument("--context", type=int, default=256, help="prompt tokens per request")
    ap.add_argument("--steps", type=int, default=48, help="timed decode steps per batch")
    ap.add_argument("--warmup", type=int, default=4, help="untimed steps before them")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--kv-alloc", default="contiguous", choices=["contiguous", "scattered"])
    ap.add_argument(
        "--pool-tokens", type=int, default=262144, help="KV pool (serve's GPU default cap)"
    )
    ap.add_argument("--eager", action="store_true", help="cuda: no CUDA graphs / paged kernel")
    ap.add_argument("--no-compile", action="store_true", help="cuda: graphs without compile")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (a busy box: 1)")
    ap.add_argument("--profile", type=int, default=0, help="cProfile the steps: top N rows")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    args.batch_list = [int(x) for x in args.batches.split(",")]
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    backend = build(args)
    print(
        f"device={args.device} shape={args.model_shape} path={backend.info.extra['fast_path']} "
        f"page={args.page_size} {args.kv_alloc} pool={backend.kv.num_pages} pages "
        f"context={args.context} steps={args.steps} torch={torch.__version__}",
        flush=True,
    )
    print(
        f"{'batch':>5} | {'step ms':>8} {'model ms':>8} {'anchor ms':>9} {'host ms':>8} "
        f"{'us/req':>7} | step/anchor | {'overlap ms':>10} overlap/anchor"
    )
    rows = []
    for batch in args.batch_list:
        profiler = cProfile.Profile() if args.profile else None
        row = measure(backend, batch, args, profiler)
        rows.append(row)
        model = "-" if row["model_ms"] is None else f"{row['model_ms']:.3f}"
        print(
            f"{batch:>5} | {row['step_ms']:>8.3f} {model:>8} {row['anchor_ms']:>9.3f} "
            f"{row['host_ms']:>8.3f} "
            f"{row['host_us_per_request']:>7.1f} | {row['step_over_anchor']:11.2f} | "
            f"{row['overlapped_step_ms']:>10.3f} {row['overlapped_over_anchor']:.2f}",
            flush=True,
        )
        if profiler is not None:
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.profile)
            print(text.getvalue())
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": None}, "rows": rows}))


if __name__ == "__main__":
    main()
