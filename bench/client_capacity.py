"""The client's ceiling: the largest chunk rate one specscope worker reads on time, and how it
scales with `probe --workers` (issue #37).

A loopback server in its own process streams vLLM-style SSE chunks (continuous usage), one every
PERIOD ms per stream, to C concurrent streams; the probe reads them as `probe --workers N` does:
one worker is the probe's client on this process' loop (`probe.fleet.InProcess`), N workers are
spawned processes (`probe.workers.LocalFleet`) whose raw traces and loop-lag samples come back to
this driver. Per level: the chunk rate offered and read, and the loop lag while the streams ran
(mean, p50, p99), its percentiles from the raw samples of every worker inside the level's window
(probe/health.py: the samples the guard of card `client_limited` reads). The ceiling of a
worker count is the largest rate read with a p99 lag of at most 0.5 ms (issue #37; the table
also gives it at looser bounds, since a shared machine's scheduler may never read 0.5 ms), and
the N-worker ceiling is printed as a ratio to the one-worker ceiling measured in the same run
(the anchor). The chunk server, the driver and the workers share this machine's cores: on two
cores the ratio says what a second process buys there, not what a larger client host would.
Each level's figures are the median of `--rounds` rounds, the worker counts taking turns (the
machine's load then falls on both alike). Bounded: a few seconds per level, under two minutes.

    .venv/bin/python bench/client_capacity.py [--period-ms 10] [--chunks 300]
        [--levels 1,8,32,64,128,256] [--workers 1,2] [--rounds 2] [--timeout-s 115]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np

# the scheduled SSE chunk server of the client-overhead bench (bench/ is on sys.path when a
# script in it runs, and a spawned child gets the parent's path)
from probe_overhead import chunk_server
from specscope.probe.client import ProbeClient, Timeouts
from specscope.probe.flavors import make_flavor
from specscope.probe.fleet import InProcess
from specscope.probe.worker import WorkerSetup
from specscope.probe.workers import LocalFleet
from specscope.trace.model import RequestSpec, RequestTrace

P99_LIMIT_S = 0.0005
BOUNDS_S = (P99_LIMIT_S, 0.001, 0.002, 0.005)


def _lags_in(records: list[dict[str, Any]], t0: int, t1: int) -> np.ndarray:
    """Every worker's lag samples (seconds) taken between t0 and t1 (ns, the driver's clock)."""
    out = []
    for rec in records:
        t_ns = rec["t0_ns"] + 1000 * np.asarray(rec["t_us"], dtype=np.int64)
        lag = np.asarray(rec["lag_us"], dtype=float) / 1e6
        out.append(lag[(t_ns >= t0) & (t_ns <= t1)])
    return np.concatenate(out) if out else np.zeros(0)


async def _levels(
    url: str, workers: int, levels: list[int], chunks: int, period_ms: float
) -> list[dict[str, float]]:
    """Each level's C streams through the probe's runner of `workers` workers."""
    flavor, timeouts = make_flavor("vllm"), Timeouts(total=120.0)
    spec = RequestSpec(prompt="x", max_tokens=chunks, extra={"period_ms": period_ms})
    runner = (
        InProcess(ProbeClient(url, flavor, timeouts=timeouts))
        if workers == 1
        else LocalFleet(workers, WorkerSetup(url, flavor, timeouts))
    )
    spans = []
    async with runner:
        for c in levels:
            traces: list[RequestTrace] = []
            t0 = time.perf_counter_ns()
            await runner.run([spec] * c, c, traces.append, 0)
            t1 = time.perf_counter_ns()
            failed = [t for t in traces if t.error is not None]
            if failed:
                raise SystemExit(f"{len(failed)} stream(s) failed: {failed[0].error}")
            spans.append((c, t0, t1, sum(len(t.chunks) for t in traces)))
    records = runner.records()
    rows = []
    for c, t0, t1, n_chunks in spans:
        lags = _lags_in(records, t0, t1)
        rows.append(
            {
                "streams": float(c),
                "offered": c * 1e3 / period_ms,
                "read": n_chunks / ((t1 - t0) / 1e9),
                "lag_mean": float(lags.mean()),
                "lag_p50": float(np.percentile(lags, 50)),
                "lag_p99": float(np.percentile(lags, 99)),
            }
        )
    return rows


def _ceiling(rows: list[dict[str, float]], bound_s: float) -> float | None:
    on_time = [r["read"] for r in rows if r["lag_p99"] <= bound_s]
    return max(on_time) if on_time else None


def _print_levels(workers: int, rows: list[dict[str, float]]) -> None:
    print(f"-- {workers} worker(s)")
    print(f"{'streams':>8} {'offered/s':>10} {'read/s':>10} {'lag mean':>9} {'p50':>8} {'p99':>8}")
    for r in rows:
        print(
            f"{r['streams']:8.0f} {r['offered']:10.0f} {r['read']:10.0f} "
            f"{r['lag_mean'] * 1e3:7.2f}ms {r['lag_p50'] * 1e3:6.2f}ms {r['lag_p99'] * 1e3:6.2f}ms"
        )


def _print_ceilings(by_workers: dict[int, list[dict[str, float]]]) -> None:
    counts = sorted(by_workers)
    anchor_n = counts[0]
    print(f"ceilings (largest chunks/s read with p99 lag <= bound), ratio to {anchor_n} worker(s):")
    for bound in BOUNDS_S:
        ceilings = {n: _ceiling(by_workers[n], bound) for n in counts}
        anchor = ceilings[anchor_n]
        cells = []
        for n in counts:
            c = ceilings[n]
            cell = f"{n} worker(s) {c:.0f}/s" if c is not None else f"{n} worker(s) none"
            if n != anchor_n and c is not None and anchor:
                cell += f" = {c / anchor:.2f}x"
            cells.append(cell)
        print(f"  p99 <= {bound * 1e3:.1f} ms: " + "; ".join(cells))
    one = by_workers[anchor_n][0]
    print(
        f"(the one-stream level of {anchor_n} worker(s) read {one['read']:.0f} chunks/s at p99 "
        f"{one['lag_p99'] * 1e3:.2f} ms)"
    )


def _median_rows(rounds: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    """Per level, the median over rounds of each figure (a shared machine's stray stall moves
    one round's p99, not the median of several)."""
    return [
        {k: float(np.median([r[i][k] for r in rounds])) for k in rounds[0][i]}
        for i in range(len(rounds[0]))
    ]


async def main(
    url: str, workers: list[int], levels: list[int], chunks: int, period_ms: float, rounds: int
) -> None:
    print(
        f"{chunks} chunks a stream, one every {period_ms:g} ms; loop lag of the workers; "
        f"medians of {rounds} round(s), the worker counts taking turns"
    )
    measured: dict[int, list[list[dict[str, float]]]] = {n: [] for n in workers}
    for _ in range(rounds):
        for n in workers:
            measured[n].append(
                await _levels(url, n, [max(c, n) for c in levels], chunks, period_ms)
            )
    by_workers = {n: _median_rows(measured[n]) for n in workers}
    for n in workers:
        _print_levels(n, by_workers[n])
    _print_ceilings(by_workers)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--period-ms", type=float, default=10.0)
    ap.add_argument("--chunks", type=int, default=300)
    ap.add_argument("--levels", default="1,8,32,64,128,256")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=115.0, help="the whole bench's bound")
    a = ap.parse_args()
    with chunk_server() as url:
        t_start = time.perf_counter()
        levels = [int(x) for x in a.levels.split(",")]
        counts = [int(x) for x in a.workers.split(",")]
        asyncio.run(
            asyncio.wait_for(
                main(url, counts, levels, a.chunks, a.period_ms, a.rounds), a.timeout_s
            )
        )
        print(f"(bench took {time.perf_counter() - t_start:.1f} s)")
