"""How faithfully the twin keeps its own schedule: each batched verify step's actual duration
(server side, from its scheduled start to the wake-up after the sleep) against the scheduled
duration, p50/p99 of the relative error, at concurrency 1 and 64. This bounds how precisely any
client can measure the twin.

Anchor, measured side by side in this process: a bare `asyncio.sleep` loop over the same
durations (no HTTP, no server) — the floor this machine's event loop allows. The ratio
twin/anchor says what the server adds. Bounded: < 60 s.

    .venv/bin/python bench/twin_fidelity.py
"""

from __future__ import annotations

import asyncio
import sys
import time

import aiohttp
import numpy as np

from specscope.twin.server import start_twin_server

BUDGET_S = 55.0


def _errors(pairs: list[tuple[float, float]]) -> np.ndarray:
    return np.array([abs(actual - sched) / sched for sched, actual in pairs if sched > 0])


async def _drive(url: str, concurrency: int, requests: int, max_tokens: int) -> None:
    sem = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=BUDGET_S)

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        async with (
            sem,
            session.post(
                url + "/v1/completions",
                json={"prompt": f"fidelity {i}", "max_tokens": max_tokens, "stream": True},
            ) as r,
        ):
            async for _ in r.content:
                pass

    async with aiohttp.ClientSession(timeout=timeout) as s:
        await asyncio.gather(*(one(s, i) for i in range(requests)))


async def _anchor(durations: list[float]) -> list[tuple[float, float]]:
    out = []
    for d in durations:
        t0 = time.perf_counter()
        await asyncio.sleep(d)
        out.append((d, time.perf_counter() - t0))
    return out


def main() -> int:
    t_start = time.monotonic()
    rows = []
    for concurrency, requests, max_tokens in ((1, 8, 200), (64, 64, 100)):
        srv = start_twin_server("healthy", max_batch=64)
        try:
            asyncio.run(_drive(srv.url, concurrency, requests, max_tokens))
            log = list(srv.backend.step_log)
        finally:
            srv.stop()
        pairs = [(s, a) for s, a, _, _ in log]
        twin = _errors(pairs)
        anchor = _errors(asyncio.run(_anchor([s for s, _ in pairs[:400]])))
        batch = max(b for _, _, b, _ in log)
        rows.append(
            (concurrency, len(pairs), batch, np.median([s for s, _ in pairs]), twin, anchor)
        )
        if time.monotonic() - t_start > BUDGET_S:
            print("stopped early: time budget spent", file=sys.stderr)
            break
    print(
        f"{'conc':>4} {'steps':>6} {'max batch':>9} {'step p50 ms':>11} "
        f"{'err p50':>8} {'err p99':>8} {'anchor p50':>10} {'anchor p99':>10} {'ratio p50':>9}"
    )
    for conc, n, batch, med, twin, anchor in rows:
        p50, p99 = np.percentile(twin, 50), np.percentile(twin, 99)
        a50, a99 = np.percentile(anchor, 50), np.percentile(anchor, 99)
        print(
            f"{conc:>4} {n:>6} {batch:>9} {med * 1e3:>11.2f} {p50:>8.2%} {p99:>8.2%} "
            f"{a50:>10.2%} {a99:>10.2%} {p50 / max(a50, 1e-9):>9.2f}"
        )
    print(f"total {time.monotonic() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
