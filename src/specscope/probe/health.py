"""The client's own timing health: how late this process's event loop answers a wake-up.

Every chunk is stamped when the event loop gets round to the socket read (ARCHITECTURE §10).
A loop that is busy (parsing another stream, the report, an embedded server's thread holding
the GIL) or a process the OS has descheduled stamps late, and against 1-3 ms verify steps a
millisecond of lateness is read as step time. So the probe measures its own lateness, always.

How: a helper thread wakes on a fixed grid (every `PERIOD_S`) and hands the loop a callback
with `call_soon_threadsafe`, which wakes the loop through its self-pipe, the same way a socket
read wakes it; the callback's delay past the grid point is the lag. A timer inside the loop
(`asyncio.sleep`) would add the selector's millisecond rounding of its timeout to every sample
(aiperf saw uvloop timers quantise pacing to ~1 ms); a wake-up through a file descriptor has
none, so an idle loop reads tens of microseconds. The thread needs the GIL to post its
callback, so a loop that holds the GIL in Python code delays the post as well: that wait is in
the lag too (the grid point, not the post, is the reference).

The samples are raw (the grid point and the lag, per worker) so that percentiles are computed
from all of them in one place (analysis/client_health.py), never merged from summaries.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from array import array
from typing import Any

PERIOD_S = 0.005  # 200 samples a second: ~0.5% of one core for the thread and the callbacks


class LoopLagMonitor:
    """Samples the running loop's lag while inside `async with`. `record()` is the run dir's
    `client.jsonl` line for this worker (grid points and lags in microseconds, from `t0_ns`)."""

    def __init__(self, worker: int = 0, period_s: float = PERIOD_S) -> None:
        self.worker = worker
        self.period_ns = int(period_s * 1e9)
        self._t = array("q")  # grid points, ns (perf_counter): 8 bytes a sample, not 36
        self._lag = array("q")  # ns past the grid point
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> LoopLagMonitor:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._tick, name="specscope-lag", daemon=True)
        self._thread.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stops sampling (idempotent); the samples taken stay."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    def _tick(self) -> None:
        loop = self._loop
        assert loop is not None
        due = time.perf_counter_ns() + self.period_ns
        while not self._stop.wait(max(due - time.perf_counter_ns(), 0) / 1e9):
            try:
                loop.call_soon_threadsafe(self._land, due)
            except RuntimeError:  # the loop closed under us: nothing left to measure
                return
            # the next grid point; a thread that overslept skips the points it missed (each
            # would otherwise count the same stall again)
            now = time.perf_counter_ns()
            due += self.period_ns * max(1, (now - due) // self.period_ns + 1)

    def _land(self, due: int) -> None:
        if not self._stop.is_set():
            self._t.append(due)
            self._lag.append(time.perf_counter_ns() - due)

    @property
    def samples(self) -> int:
        return len(self._lag)

    def record(self) -> dict[str, Any]:
        """This worker's samples as one JSON object (`client.jsonl`, ARCHITECTURE §4)."""
        t0 = self._t[0] if self._t else 0
        return {
            "worker": self.worker,
            "pid": os.getpid(),
            "period_s": self.period_ns / 1e9,
            "t0_ns": t0,
            "t_us": [(t - t0) // 1000 for t in self._t],
            "lag_us": [v // 1000 for v in self._lag],
        }
