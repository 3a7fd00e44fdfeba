"""How much does the probe's client cost? Timestamp error and max chunks/s, against a plain
aiohttp read loop measured side by side (the anchor).

A loopback server in its own process streams vLLM-style SSE chunks (continuous usage) either on
a fixed schedule (one chunk every PERIOD ms: timestamp error = client stamp - server write time,
both CLOCK_MONOTONIC on this machine) or as fast as it can (throughput). Bounded: well under 60 s.

    .venv/bin/python bench/probe_overhead.py
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing as mp
import statistics
import time
from collections.abc import Iterator

import aiohttp
from aiohttp import web

from specscope.probe.client import ProbeClient, Timeouts
from specscope.probe.flavors import make_flavor
from specscope.trace.model import RequestSpec

SCHEDULED_CHUNKS = 300
PERIOD_MS = 4.0
THROUGHPUT_CHUNKS = 20_000
ROUNDS = 3


def _serve(q: mp.Queue) -> None:
    sent: list[int] = []

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = int(body["max_tokens"])
        period = float(body.get("period_ms", 0.0)) / 1e3
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        sent.clear()
        t0 = time.perf_counter()
        for i in range(1, n + 1):
            if period:
                delay = t0 + i * period - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            chunk = {
                "id": "b",
                "choices": [
                    {"index": 0, "text": " t", "finish_reason": "length" if i == n else None}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": i, "total_tokens": i + 1},
            }
            sent.append(time.perf_counter_ns())
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def sent_h(_: web.Request) -> web.Response:
        return web.json_response(sent)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        app.router.add_get("/sent", sent_h)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        q.put(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await asyncio.sleep(3600)

    asyncio.run(main())


async def _probe_once(url: str, n: int, period_ms: float) -> tuple[list[int], float]:
    flavor = make_flavor("vllm")
    spec = RequestSpec(prompt="x", max_tokens=n, ignore_eos=False, extra={"period_ms": period_ms})
    async with ProbeClient(url, flavor, timeouts=Timeouts(total=60.0)) as client:
        t0 = time.perf_counter()
        trace = await client.send(spec)
        wall = time.perf_counter() - t0
    if trace.error:
        raise SystemExit(f"probe client failed: {trace.error.kind}: {trace.error.message}")
    stamps = []
    for c in trace.chunks:  # one stamp per token (usage delta), in order
        stamps += [c.t_ns] * c.n_tokens
    return stamps, wall


async def _anchor_once(url: str, n: int, period_ms: float) -> tuple[list[int], float]:
    """The plain loop: read, stamp, count events in the read. No parsing beyond that."""
    stamps: list[int] = []
    body = {
        "prompt": "x",
        "max_tokens": n,
        "stream": True,
        "period_ms": period_ms,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    async with aiohttp.ClientSession() as s:
        t0 = time.perf_counter()
        async with s.post(url + "/v1/completions", json=body) as resp:
            async for data in resp.content.iter_any():
                t = time.perf_counter_ns()
                stamps += [t] * data.count(b"\n\n")
        wall = time.perf_counter() - t0
    return stamps[:n], wall


async def _sent(url: str) -> list[int]:
    async with aiohttp.ClientSession() as s, s.get(url + "/sent") as r:
        return await r.json()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


async def main(url: str) -> None:
    print(f"timestamp error: {SCHEDULED_CHUNKS} chunks every {PERIOD_MS} ms, best of {ROUNDS}")
    err: dict[str, list[float]] = {}
    for name, fn in (
        ("anchor (plain aiohttp loop)", _anchor_once),
        ("specscope probe client", _probe_once),
    ):
        best: list[float] | None = None
        for _ in range(ROUNDS):
            stamps, _wall = await fn(url, SCHEDULED_CHUNKS, PERIOD_MS)
            sent = await _sent(url)
            e = [(c - s) / 1e3 for c, s in zip(stamps, sent, strict=False)]  # microseconds
            if best is None or statistics.median(e) < statistics.median(best):
                best = e
        assert best is not None
        err[name] = best
        print(f"  {name:30s} p50 {_pct(best, 50):8.1f} us   p99 {_pct(best, 99):8.1f} us")
    a, p = err["anchor (plain aiohttp loop)"], err["specscope probe client"]
    print(
        f"  ratio probe/anchor: p50 {_pct(p, 50) / max(_pct(a, 50), 1e-9):.2f}x   "
        f"p99 {_pct(p, 99) / max(_pct(a, 99), 1e-9):.2f}x"
    )

    print(f"throughput: {THROUGHPUT_CHUNKS} chunks as fast as the server writes, best of {ROUNDS}")
    rate: dict[str, float] = {}
    for name, fn in (
        ("anchor (plain aiohttp loop)", _anchor_once),
        ("specscope probe client", _probe_once),
    ):
        best_rate = 0.0
        for _ in range(ROUNDS):
            stamps, wall = await fn(url, THROUGHPUT_CHUNKS, 0.0)
            best_rate = max(best_rate, len(stamps) / wall)
        rate[name] = best_rate
        print(f"  {name:30s} {best_rate:10.0f} chunks/s")
    print(
        f"  ratio probe/anchor: {rate['specscope probe client'] / rate['anchor (plain aiohttp loop)']:.2f}x"
        "  (the server shares the machine's cores: both are bounded by it too)"
    )


@contextlib.contextmanager
def chunk_server() -> Iterator[str]:
    """The SSE chunk server in a process of its own (so its work is not the client's), its base
    URL while the block runs; stopped after it."""
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()
    proc = ctx.Process(target=_serve, args=(q,), daemon=True)
    proc.start()
    try:
        yield f"http://127.0.0.1:{q.get(timeout=30)}"
    finally:
        proc.terminate()
        proc.join(5)


if __name__ == "__main__":
    with chunk_server() as url:
        t_start = time.perf_counter()
        asyncio.run(asyncio.wait_for(main(url), timeout=55))
        print(f"(bench took {time.perf_counter() - t_start:.1f} s)")
