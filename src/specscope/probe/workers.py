"""`probe --workers N` on one host: N spawned processes, one event loop each, no Ray.

Why processes and not threads: a thread shares the GIL, so a busy reader in one delays the
others' stamps exactly as one loop would. Why `spawn`: the driver has threads (the loop-lag
monitor, an embedded server's), and a forked child of a threaded process may inherit a held
lock. Why one pipe per worker, not one shared `multiprocessing.Queue`: a worker killed while it
holds a shared queue's write lock would block every other worker's writes; a dead worker's pipe
just ends (EOF), which is how the driver learns it is gone.

The protocol on each pipe: the child says hello (pid, clock identity, host), answers
`CLOCK_PINGS` pings with its clock (the driver fits the offset: on one host it reads ~0, the
clock being one), then serves `job` (a share: it answers `trace` lines as requests end, then
`done`), `stop` (cancel the share: what ran is handed back, in-flight requests as `cancelled`)
and `close` (its lag samples, `client`, then it exits). The child ignores SIGINT from its start
(it inherits an ignored SIGINT): a Ctrl-C in the terminal reaches the whole process group, and
the driver, not each worker, decides what happens (it sends `stop`). A driver that vanishes closes the pipe: the child stops and exits.
The child's loop never writes to the pipe itself; a sender thread does, so a driver slow to read
cannot stall a worker's measurement.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

from specscope.probe.fleet import Fleet, FleetError
from specscope.probe.worker import (
    CLOCK_PINGS,
    ClockFit,
    Share,
    WorkerCore,
    WorkerSetup,
    clock_identity,
)
from specscope.trace.rundir import trace_line

START_TIMEOUT_S = 60.0  # a spawned interpreter imports the probe: seconds on a busy machine
SEND_GRACE_S = 10.0  # a closing worker's wait for its last messages to leave


# -- in the worker process ---------------------------------------------------------------------
def worker_main(worker: int, setup: WorkerSetup, conn: Connection) -> None:
    """The spawned process' entry point (SIGINT is ignored already: _children_ignore_sigint)."""
    conn.send(("hello", os.getpid(), clock_identity(), socket.gethostname()))
    for _ in range(CLOCK_PINGS):
        conn.recv()
        conn.send(("pong", time.perf_counter_ns()))
    asyncio.run(_serve(worker, setup, conn))


async def _serve(worker: int, setup: WorkerSetup, conn: Connection) -> None:
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
    outbox: queue.SimpleQueue[tuple[str, Any] | None] = queue.SimpleQueue()
    current: list[asyncio.Task[None]] = []
    stopped = False

    def deliver(msg: tuple[Any, ...]) -> None:
        nonlocal stopped
        if msg[0] == "stop":
            stopped = True
            for task in current:
                task.cancel()
        else:
            inbox.put_nowait(msg)

    threading.Thread(target=_read, args=(conn, loop, deliver), daemon=True).start()
    sender = threading.Thread(target=_send, args=(conn, outbox), daemon=True)
    sender.start()
    async with WorkerCore(worker, setup) as core:
        while (msg := await inbox.get())[0] == "job":
            if not stopped:
                task = loop.create_task(
                    core.run(msg[1], lambda t: outbox.put(("trace", trace_line(t))))
                )
                current.append(task)
                await asyncio.wait([task])
                current.clear()
            outbox.put(("done", None))
    outbox.put(("client", core.record()))
    outbox.put(None)
    sender.join(timeout=SEND_GRACE_S)


def _read(conn: Connection, loop: asyncio.AbstractEventLoop, deliver: Any) -> None:
    """The driver's messages onto the worker's loop; a vanished driver is stop + close."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            msg = ("gone",)
        with contextlib.suppress(RuntimeError):  # the loop has closed: nothing left to tell
            if msg[0] == "gone":
                loop.call_soon_threadsafe(deliver, ("stop",))
                loop.call_soon_threadsafe(deliver, ("close",))
                return
            loop.call_soon_threadsafe(deliver, msg)
        if msg[0] == "close":
            return


def _send(conn: Connection, outbox: queue.SimpleQueue[tuple[str, Any] | None]) -> None:
    while (msg := outbox.get()) is not None:
        try:
            conn.send(msg)
        except OSError:  # the driver is gone
            return


# -- in the driver ------------------------------------------------------------------------------
@contextlib.contextmanager
def _children_ignore_sigint() -> Iterator[None]:
    """Processes started inside ignore SIGINT from their first instruction: an ignored signal
    survives exec, and Python then installs no KeyboardInterrupt handler (a Ctrl-C that reached a
    worker still importing would print its traceback). The driver ignores SIGINT for the few
    milliseconds of a start; off the main thread (a library caller's) nothing can be changed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


class LocalFleet(Fleet):
    """N spawned worker processes on this host, one pipe each."""

    transport = "process"

    def __init__(self, n: int, setup: WorkerSetup) -> None:
        super().__init__(n, setup)
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._closing: set[int] = set()
        self._reader: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _open(self) -> None:
        self._loop = asyncio.get_running_loop()
        ctx = mp.get_context("spawn")
        for w in range(self.n):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=worker_main,
                args=(w, self.setup, child),
                name=f"specscope-worker-{w}",
                daemon=True,
            )
            with _children_ignore_sigint():
                proc.start()
            child.close()
            self._procs.append(proc)
            self._conns.append(parent)
        await asyncio.gather(*(asyncio.to_thread(self._hello, w) for w in range(self.n)))
        self._reader = threading.Thread(target=self._read, name="specscope-fleet", daemon=True)
        self._reader.start()

    def _hello(self, w: int) -> None:
        """The child's hello and its clock against ours (runs in a thread: blocking reads)."""
        conn, state = self._conns[w], self.workers[w]
        try:
            if not conn.poll(START_TIMEOUT_S):
                raise FleetError(
                    f"--workers: worker {w} did not start within {START_TIMEOUT_S:g} s"
                )
            _, state.pid, state.clock, state.host = conn.recv()
            pings = []
            for _ in range(CLOCK_PINGS):
                t0 = time.perf_counter_ns()
                conn.send(("ping",))
                _, tw = conn.recv()
                pings.append((t0, tw, time.perf_counter_ns()))
        except (EOFError, OSError):
            raise FleetError(f"--workers: worker {w} {self._ended(w)} while starting") from None
        state.fit = ClockFit.from_pings(pings)

    def _ended(self, w: int) -> str:
        """How a worker process ended, in words."""
        proc = self._procs[w]
        proc.join(timeout=1.0)
        code = proc.exitcode
        if code is None:
            return f"(pid {proc.pid}) closed its pipe"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"(pid {proc.pid}) was killed by {signal.Signals(-code).name}"
        return f"(pid {proc.pid}) exited with code {code}"

    def _read(self) -> None:
        """Every worker's messages onto the driver's loop, until every pipe has ended."""
        live = {conn: w for w, conn in enumerate(self._conns)}
        while live:
            try:
                ready = wait(list(live), timeout=0.5)
            except (OSError, ValueError):  # the pipes were closed under us: the fleet is closed
                return
            for conn in ready:
                w = live[conn]
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError):
                    del live[conn]
                    if w not in self._closing:
                        self._post(w, "lost", f"worker {w} {self._ended(w)} mid-run")
                    continue
                if kind == "client":
                    self._closing.add(w)
                self._post(w, kind, payload)

    def _post(self, w: int, kind: str, payload: Any) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the driver's loop has closed
            self._loop.call_soon_threadsafe(self.events.put_nowait, (w, kind, payload))

    def _tell(self, w: int, msg: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError):  # a dead worker: its reader posts `lost`
            self._conns[w].send(msg)

    async def _job(self, share: Share) -> None:
        self._tell(share.worker, ("job", share))

    async def _stop(self, worker: int) -> None:
        self._tell(worker, ("stop",))

    async def _close(self) -> None:
        """Each live worker's lag samples, then every process ended. A fleet that never finished
        starting (a worker that did not say hello, Ctrl-C during the start) has measured
        nothing: its processes are killed at once."""
        if self._reader is None:
            for proc in self._procs:
                proc.kill()
        waiting = set()
        for w, proc in enumerate(self._procs):
            if self._reader is not None and self.workers[w].lost is None and proc.is_alive():
                self._tell(w, ("close",))
                waiting.add(w)
        await self._collect_records(waiting)
        for proc in self._procs:
            await asyncio.to_thread(proc.join, 5.0)
            if proc.is_alive():
                proc.kill()
                await asyncio.to_thread(proc.join, 5.0)
        if self._reader is not None:
            await asyncio.to_thread(self._reader.join, 2.0)
        for conn in self._conns:
            conn.close()
