"""The driver's side of a probe's load: one runner interface, in this process or over workers.

`probe_run` sends every batch through a runner: `InProcess` (the default, `--workers 1`: the
probe's client on this process' loop, as before workers existed) or a `Fleet` of N worker
processes (`probe.workers.LocalFleet`, or Ray actors: `probe.ray_workers.RayFleet`). A fleet
keeps its workers for the whole probe (a `--precision` probe sends several batches), cuts each
batch along its slots (`worker.split_shares`), and takes back each worker's raw traces as they
end: moved onto this process' clock, handed to `on_done` (the run dir's append, the progress
bar) one by one. Nothing is summarised in a worker: the driver writes one run dir and every
percentile is computed from the raw traces and lag samples, as for one process.

What cannot be lost is not: a worker that dies has each request it had not handed back recorded
as an error (`worker_lost`, with how it ended); on Ctrl-C the driver asks every worker to stop,
and each hands back what it finished and what it had in flight (marked `cancelled`), as the
request runner does in one process. The transport (pipes, Ray calls) only starts workers, passes
messages and says when one is gone: it posts `(worker, kind, payload)` events, kind `trace` (one
JSON line), `done` (the share ended), `lost` (why) or `client` (its lag samples, at close).
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specscope.probe.client import ProbeClient
from specscope.probe.health import LoopLagMonitor
from specscope.probe.worker import (
    ClockFit,
    WorkerSetup,
    clock_identity,
    lost_trace,
    parse_trace,
    shift_trace,
    split_shares,
)
from specscope.probe.workload import run_workload
from specscope.trace.model import RequestSpec, RequestTrace

# Seconds the workers get to hand back what they had after a stop (Ctrl-C), and to send their
# lag samples at the end.
STOP_GRACE_S = 15.0

OnDone = Callable[[RequestTrace], None]


class FleetError(RuntimeError):
    """The workers could not be started or reached (one line, naming the flag)."""


class InProcess:
    """`--workers 1`: the probe's client and loop-lag monitor on this process' own loop."""

    def __init__(self, client: ProbeClient) -> None:
        self.lag = LoopLagMonitor()
        self._client = client
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> InProcess:
        await self._stack.enter_async_context(self.lag)
        await self._stack.enter_async_context(self._client)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def run(
        self,
        specs: Sequence[RequestSpec],
        concurrency: int,
        on_done: OnDone,
        first_index: int,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        await run_workload(
            self._client, specs, concurrency, on_done, first_index=first_index, stop=stop
        )

    def records(self) -> list[dict[str, Any]]:
        self.lag.stop()
        return [self.lag.record()]


@dataclass
class WorkerState:
    """What the driver knows of one worker."""

    worker: int
    pid: int | None = None
    host: str = ""
    clock: str = ""  # which CLOCK_MONOTONIC it reads (worker.clock_identity)
    fit: ClockFit | None = None
    applied_ns: int = 0  # added to its stamps: 0 where it shares the driver's clock
    lost: str | None = None  # why, once it is gone
    record: dict[str, Any] | None = None  # its lag samples, once closed

    def clock_json(self) -> dict[str, Any]:
        fit = self.fit
        return {
            "host": self.host,
            "clock_shared": self.clock == clock_identity(),
            "clock_offset_s": None if fit is None else fit.offset_ns / 1e9,
            "clock_uncertainty_s": None if fit is None else fit.uncertainty_ns / 1e9,
            "clock_applied_s": self.applied_ns / 1e9,
            "lost": self.lost,
        }


class Fleet(ABC):
    """N workers behind a transport (`async with`, then `run` per batch, `records()` after)."""

    transport = ""

    def __init__(self, n: int, setup: WorkerSetup) -> None:
        self.n = n
        self.setup = setup
        self.workers = [WorkerState(w) for w in range(n)]
        self.events: asyncio.Queue[tuple[int, str, Any]] = asyncio.Queue()
        self.stopped = False

    # -- the transport's part --------------------------------------------------------------
    @abstractmethod
    async def _open(self) -> None:
        """Start the workers; fill each state's pid, host, clock and fit."""

    @abstractmethod
    async def _job(self, share: Any) -> None:
        """Hand a worker its share (worker.Share)."""

    @abstractmethod
    async def _stop(self, worker: int) -> None:
        """Ask a worker to cancel its share (it answers `done` after handing back)."""

    @abstractmethod
    async def _close(self) -> None:
        """Ask every live worker for its lag samples (`client` events) and end them."""

    # -- the driver ------------------------------------------------------------------------
    async def __aenter__(self) -> Fleet:
        try:
            await self._open()
        except BaseException:
            with contextlib.suppress(Exception):
                await self._close()
            raise
        here = clock_identity()
        for s in self.workers:
            if s.clock != here and s.fit is not None:
                s.applied_ns = s.fit.offset_ns
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def run(
        self,
        specs: Sequence[RequestSpec],
        concurrency: int,
        on_done: OnDone,
        first_index: int,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        """Every request of the batch handed to `on_done` as its worker hands it back. `stop`,
        checked as each comes back, ends the batch early (a server that stopped answering): the
        workers are stopped and hand back what they had in flight; the rest is not sent."""
        if self.stopped:
            return  # stopped for good (the workers refuse further shares)
        live = [s.worker for s in self.workers if s.lost is None]
        if not live:
            for i, spec in enumerate(specs):
                on_done(lost_trace(first_index + i, spec, i % concurrency, "every worker was lost"))
            return
        pending: dict[int, dict[int, tuple[RequestSpec, int]]] = {}
        for share in split_shares(live, specs, concurrency, first_index):
            if share.specs:
                pending[share.worker] = {
                    i: (spec, (i - first_index) % concurrency)
                    for i, spec in zip(share.indices, share.specs, strict=True)
                }
                await self._job(share)
        try:
            while pending:
                self._take(*await self.events.get(), pending, on_done)
                if stop is not None and pending and stop():
                    await self._halt(pending, on_done)
        except asyncio.CancelledError:
            await self._halt(pending, on_done)
            raise

    def _take(
        self,
        w: int,
        kind: str,
        payload: Any,
        pending: dict[int, dict[int, tuple[RequestSpec, int]]],
        on_done: OnDone,
        interrupted: bool = False,
    ) -> None:
        """One event: a trace handed back, or a worker done or gone (its leftovers recorded)."""
        state = self.workers[w]
        if kind == "trace":
            trace = shift_trace(parse_trace(payload), state.applied_ns)
            pending.get(w, {}).pop(trace.index, None)
            on_done(trace)
        elif kind == "client":
            state.record = payload
        elif kind in ("done", "lost"):
            if kind == "lost":
                state.lost = str(payload)
            left = pending.pop(w, {})
            if interrupted and kind == "done":
                return  # never started: an interrupted run does not record those (run_workload)
            why = state.lost or f"worker {w} ended its share without handing this request back"
            for index, (spec, slot) in sorted(left.items()):
                on_done(lost_trace(index, spec, slot, why))

    async def _halt(
        self, pending: dict[int, dict[int, tuple[RequestSpec, int]]], on_done: OnDone
    ) -> None:
        """Ctrl-C (or `stop`): stop every busy worker and take back what it finished or had in
        flight; a stopped fleet sends nothing more."""
        self.stopped = True
        for w in list(pending):
            with contextlib.suppress(Exception):
                await self._stop(w)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_GRACE_S
        while pending:
            try:
                event = await asyncio.wait_for(self.events.get(), deadline - loop.time())
            except TimeoutError:
                break
            self._take(*event, pending, on_done, interrupted=True)
        for w, left in pending.items():
            why = f"run stopped; worker {w} did not hand this request back in time"
            for index, (spec, slot) in sorted(left.items()):
                on_done(lost_trace(index, spec, slot, why))
        pending.clear()

    async def _collect_records(self, waiting: set[int]) -> None:
        """At close: the `client` events of the workers in `waiting` (bounded in time)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_GRACE_S
        while waiting:
            try:
                w, kind, payload = await asyncio.wait_for(self.events.get(), deadline - loop.time())
            except TimeoutError:
                return
            if kind == "client":
                self.workers[w].record = payload
                waiting.discard(w)
            elif kind == "lost":
                self.workers[w].lost = self.workers[w].lost or str(payload)
                waiting.discard(w)

    def records(self) -> list[dict[str, Any]]:
        """One `client.jsonl` line per worker: its lag samples on the driver's clock (none from
        a worker that was lost), with its clock against the driver's."""
        out = []
        for s in self.workers:
            rec = dict(s.record) if s.record else {"worker": s.worker, "pid": s.pid, "t_us": []}
            rec.setdefault("t0_ns", 0)
            rec.setdefault("lag_us", [])
            if rec["t_us"]:
                rec["t0_ns"] += s.applied_ns
            rec.update(transport=self.transport, **s.clock_json())
            out.append(rec)
        return out
