"""The watch loop over a long fast run holds bounded memory: tens of thousands of canaries
(a fake one, no server: each a synthetic stream of ~5-token steps) through the real loop,
windows every few milliseconds; the memory the loop holds stops growing after the first few
thousand, and what it keeps (pending samples, alerts, the detector's deques) stays capped."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import tracemalloc
from typing import Any

import numpy as np
import pytest

from specscope.analysis.watch import detector
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


# The detector's deques capped at KEEP_HERE for this test (the shipped KEEP is 4096, which takes
# ~8,000 canaries to show a plateau: minutes on a loaded machine); the bound is the same code.
KEEP_HERE = 256
CANARIES = 2400
MARK_EVERY = 400


async def _until(w: Watch, canary: FakeCanary, n: int) -> None:
    """Run the watch until the fake canary has sent `n` (a count, not a time: a loaded machine
    only takes longer)."""
    task = asyncio.create_task(w.run())
    while canary.sent < n and not task.done():
        await asyncio.sleep(0.05)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@pytest.mark.timeout(600)
def test_a_long_fast_watch_holds_bounded_memory(monkeypatch):
    canary = FakeCanary()

    async def fake_start(session: Any, o: WatchOptions) -> FakeCanary:
        return canary

    monkeypatch.setattr(watch_loop, "start_canary", fake_start)
    monkeypatch.setattr(detector, "KEEP", KEEP_HERE)
    seen = {"windows": 0, "alerts": 0}
    marks: dict[int, int] = {}

    def sink(event: Any) -> None:
        name = type(event).__name__
        seen["windows"] += name == "Window"
        seen["alerts"] += name == "Alert"
        if name == "Window" and canary.sent >= MARK_EVERY * (len(marks) + 1):
            gc.collect()
            marks[canary.sent] = tracemalloc.get_traced_memory()[0]

    o = WatchOptions(
        url="http://127.0.0.1:1", probe_every_s=0.0001, interval_s=0.05, warmup_s=0.001,
        duration_s=3600.0,
    )  # fmt: skip
    w = Watch(o, sink)
    tracemalloc.start()
    try:
        asyncio.run(_until(w, canary, CANARIES))
    finally:
        tracemalloc.stop()
    print("canaries", canary.sent, "windows", seen["windows"], "traced bytes by canaries", marks)
    assert canary.sent >= CANARIES and len(marks) >= 4, marks
    sizes = list(marks.values())
    # once the deques are full (KEEP_HERE samples: by the third mark) no growth beyond 1 MB
    # over the thousand-odd canaries after
    assert sizes[-1] - sizes[2] < 1_000_000, marks
    assert w.pending == [] or len(w.pending) < 1000
    assert all(len(f.kept) <= KEEP_HERE for f in w.detector.factors.values())
    assert len(w.alerts) <= 100
