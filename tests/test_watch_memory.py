"""The watch loop over a long fast run holds bounded memory: tens of thousands of canaries
(a fake one, no server: each a synthetic stream of ~5-token steps) through the real loop,
windows every few milliseconds; the memory the loop holds stops growing after the first few
thousand, and what it keeps (pending samples, alerts, the detector's deques) stays capped."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

import numpy as np
import pytest

from specscope.analysis.watch.detector import KEEP
from specscope.trace.model import Chunk, RequestSpec, RequestTrace
from specscope.watch import loop as watch_loop
from specscope.watch.loop import Watch
from specscope.watch.options import WatchOptions

SPEC = RequestSpec(prompt="x", prompt_tokens=512, max_tokens=256)


class FakeCanary:
    """Streams of 50 steps of 4-6 tokens, 16 ms apart (on paper: nothing sleeps)."""

    server_info: dict[str, Any] = {}
    max_commit_len = 8

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)
        self.sent = 0

    async def send(self) -> RequestTrace:
        self.sent += 1
        t = 1_000_000_000 * self.sent
        chunks = [Chunk(t_ns=t + 20_000_000, n_tokens=1)]
        for _ in range(50):
            step = int(16_000_000 * np.exp(0.05 * self.rng.standard_normal()))
            chunks.append(Chunk(t_ns=chunks[-1].t_ns + step, n_tokens=int(self.rng.integers(4, 7))))
        n = sum(c.n_tokens for c in chunks)
        trace = RequestTrace(index=self.sent, spec=SPEC, t_send_ns=t, chunks=chunks)
        trace.completion_tokens, trace.t_end_ns = n, chunks[-1].t_ns
        await asyncio.sleep(0)
        return trace


@pytest.mark.timeout(180)
def test_a_long_fast_watch_holds_bounded_memory(monkeypatch):
    canary = FakeCanary()

    async def fake_start(session: Any, o: WatchOptions) -> FakeCanary:
        return canary

    monkeypatch.setattr(watch_loop, "start_canary", fake_start)
    seen = {"windows": 0, "alerts": 0}
    marks: dict[int, int] = {}

    def sink(event: Any) -> None:
        name = type(event).__name__
        seen["windows"] += name == "Window"
        seen["alerts"] += name == "Alert"
        if name == "Window" and canary.sent >= 2000 * (len(marks) + 1):
            gc.collect()
            marks[canary.sent] = tracemalloc.get_traced_memory()[0]

    o = WatchOptions(
        url="http://127.0.0.1:1", probe_every_s=0.0001, interval_s=0.05, warmup_s=0.001,
        duration_s=25.0,
    )  # fmt: skip
    w = Watch(o, sink)
    tracemalloc.start()
    try:
        asyncio.run(w.run())
    finally:
        tracemalloc.stop()
    print("canaries", canary.sent, "windows", seen["windows"], "traced bytes by canaries", marks)
    assert canary.sent > 8000, canary.sent
    assert seen["windows"] > 100
    sizes = list(marks.values())
    # after the first marks (imports, caches, the detector's deques filling to KEEP) no growth
    # beyond 2 MB over thousands more canaries
    assert sizes[-1] - sizes[min(2, len(sizes) - 1)] < 2_000_000, marks
    assert w.pending == [] or len(w.pending) < 1000
    assert all(len(f.kept) <= KEEP for f in w.detector.factors.values())
    assert len(w.alerts) <= 100
