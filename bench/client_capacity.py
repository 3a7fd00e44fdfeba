"""The client's ceiling: the largest chunk rate one specscope worker reads on time.

A loopback server in its own process streams vLLM-style SSE chunks (continuous usage), one every
PERIOD ms per stream, to C concurrent streams; the worker reads them with the probe's own client
and request runner while it samples its event loop's lag (probe/health.py, the samples the
guard of card `client_limited` reads). Per level: the chunk rate offered and read, and the lag
(mean, p50, p99) while the streams ran. The ceiling is the largest rate read with a p99 lag of
at most 0.5 ms (issue #37), printed as a ratio to the one-stream level measured in the same run
(the anchor). Bounded: a few seconds per level, well under two minutes in all.

    .venv/bin/python bench/client_capacity.py [--period-ms 10] [--chunks 300]
        [--levels 1,8,32,64,128,256]

Several workers (`--workers`, issue #37 item 2) are not built yet: the ratio of two workers to
one is left for then.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

# the scheduled SSE chunk server of the client-overhead bench (bench/ is on sys.path when a
# script in it runs, and a spawned child gets the parent's path)
from probe_overhead import chunk_server
from specscope.probe.client import ProbeClient, Timeouts
from specscope.probe.flavors import make_flavor
from specscope.probe.health import LoopLagMonitor
from specscope.probe.workload import run_workload
from specscope.trace.model import RequestSpec

P99_LIMIT_S = 0.0005


async def _level(url: str, streams: int, chunks: int, period_ms: float) -> dict[str, float]:
    """C streams at once through the probe's client and runner, the loop's lag sampled."""
    spec = RequestSpec(prompt="x", max_tokens=chunks, extra={"period_ms": period_ms})
    async with (
        ProbeClient(url, make_flavor("vllm"), timeouts=Timeouts(total=120.0)) as client,
        LoopLagMonitor() as lag,
    ):
        t0 = time.perf_counter()
        traces = await run_workload(client, [spec] * streams, concurrency=streams)
        wall = time.perf_counter() - t0
    failed = [t for t in traces if t.error is not None]
    if failed:
        raise SystemExit(f"{len(failed)} stream(s) failed: {failed[0].error}")
    lags = np.asarray(lag.record()["lag_us"], dtype=float) / 1e6
    read = sum(len(t.chunks) for t in traces) / wall
    return {
        "offered": streams * 1e3 / period_ms,
        "read": read,
        "lag_mean": float(lags.mean()),
        "lag_p50": float(np.percentile(lags, 50)),
        "lag_p99": float(np.percentile(lags, 99)),
    }


async def main(url: str, levels: list[int], chunks: int, period_ms: float) -> None:
    print(f"{chunks} chunks a stream, one every {period_ms:g} ms; lag of the reading worker")
    print(f"{'streams':>8} {'offered/s':>10} {'read/s':>10} {'lag mean':>9} {'p50':>8} {'p99':>8}")
    rows = []
    for c in levels:
        r = await _level(url, c, chunks, period_ms)
        rows.append((c, r))
        print(
            f"{c:8d} {r['offered']:10.0f} {r['read']:10.0f} {r['lag_mean'] * 1e3:7.2f}ms "
            f"{r['lag_p50'] * 1e3:6.2f}ms {r['lag_p99'] * 1e3:6.2f}ms"
        )
    anchor = rows[0][1]["read"]
    on_time = [r["read"] for _, r in rows if r["lag_p99"] <= P99_LIMIT_S]
    if not on_time:
        print(f"no level was read with p99 lag <= {P99_LIMIT_S * 1e3:.1f} ms (not even the anchor)")
        return
    ceiling = max(on_time)
    print(
        f"ceiling (p99 lag <= {P99_LIMIT_S * 1e3:.1f} ms): {ceiling:.0f} chunks/s = "
        f"{ceiling / anchor:.1f}x the one-stream anchor ({anchor:.0f} chunks/s) in the same run"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--period-ms", type=float, default=10.0)
    ap.add_argument("--chunks", type=int, default=300)
    ap.add_argument("--levels", default="1,8,32,64,128,256")
    a = ap.parse_args()
    with chunk_server() as url:
        t_start = time.perf_counter()
        levels = [int(x) for x in a.levels.split(",")]
        asyncio.run(asyncio.wait_for(main(url, levels, a.chunks, a.period_ms), timeout=110))
        print(f"(bench took {time.perf_counter() - t_start:.1f} s)")
