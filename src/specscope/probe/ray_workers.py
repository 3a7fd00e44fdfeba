"""`probe --workers N --ray-address ADDR`: the workers as Ray actors, on several hosts.

One host's cores run out before a production server's streams do (a thousand streams send tens
of thousands of chunks a second); Ray is how the load reaches other hosts without a deployment
of our own: actors are long-lived processes with state (each holds a worker's session, client
and loop-lag monitor for the whole probe, as a local worker process does), placed across the
cluster (`SPREAD`, one CPU each), and what they return travels through Ray's object store, so a
share's raw traces reach the driver without a channel of ours. llmperf (Ray's own load generator)
is built the same way. Ray is optional (`pip install 'specscope[scale]'`); one host needs none
of it (probe.workers).

Each actor is async: its share runs on the actor's event loop while the driver polls `drain`
every `POLL_S` for the traces that ended (the progress bar moves as they come back, and a
worker that dies loses only what it had not handed back: its actor's calls fail, and the driver
records the rest of its share as `worker_lost`). Clocks: the actor reports which
CLOCK_MONOTONIC it reads (its kernel's boot id); on the driver's host the offset is 0 by
construction, elsewhere the driver's ping-pong fit is applied (probe.worker).
`--ray-address local` starts a private local cluster (tests, a one-host trial).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import socket
import time
from typing import Any

from specscope.probe.fleet import Fleet, FleetError
from specscope.probe.worker import CLOCK_PINGS, ClockFit, Share, WorkerCore, WorkerSetup
from specscope.probe.worker import clock_identity as _clock_identity
from specscope.trace.rundir import trace_line

POLL_S = 0.05
START_TIMEOUT_S = 120.0  # Ray starts a worker process per actor, and may first pull an env
CLOSE_TIMEOUT_S = 30.0
INSTALL_HINT = "pip install 'specscope[scale]'"


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


class ProbeWorkerActor:
    """One worker inside a Ray actor (made remote by RayFleet: Ray stays an optional import)."""

    def __init__(self, worker: int, setup: WorkerSetup) -> None:
        self.core = WorkerCore(worker, setup)
        self.out: list[tuple[str, Any]] = []
        self.task: asyncio.Task[None] | None = None
        self.stopped = False

    async def open(self) -> tuple[int, str, str]:
        await self.core.__aenter__()
        return os.getpid(), _clock_identity(), socket.gethostname()

    async def clock(self) -> int:
        return time.perf_counter_ns()

    async def run(self, share: Share) -> None:
        if not self.stopped:
            self.task = asyncio.get_running_loop().create_task(
                self.core.run(share, lambda t: self.out.append(("trace", trace_line(t))))
            )
            await asyncio.wait([self.task])
            self.task = None
        self.out.append(("done", None))

    async def drain(self) -> list[tuple[str, Any]]:
        out, self.out = self.out, []
        return out

    async def stop(self) -> None:
        self.stopped = True
        if self.task is not None:
            self.task.cancel()

    async def close(self) -> dict[str, Any]:
        await self.core.__aexit__(None, None, None)
        return self.core.record()


class RayFleet(Fleet):
    """N Ray actors (one CPU each, spread over the cluster's nodes)."""

    transport = "ray"

    def __init__(self, n: int, setup: WorkerSetup, address: str) -> None:
        super().__init__(n, setup)
        self.address = address
        self._actors: list[Any] = []
        self._runs: list[Any] = []
        self._poller: asyncio.Task[None] | None = None
        self._owns_ray = False

    def _init_ray(self) -> Any:
        try:
            import ray
        except ImportError:
            raise FleetError(f"--ray-address needs Ray: {INSTALL_HINT}") from None
        if ray.is_initialized():
            return ray
        local = self.address == "local"
        try:
            ray.init(
                address=self.address,
                num_cpus=max(self.n, os.cpu_count() or 1) if local else None,
                include_dashboard=False if local else None,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        except Exception as e:  # Ray raises ConnectionError, RuntimeError, ValueError...
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise FleetError(
                f"--ray-address: cannot reach a Ray cluster at {self.address}: {first}"
            ) from None
        self._owns_ray = True
        return ray

    async def _open(self) -> None:
        ray = self._init_ray()
        remote = ray.remote(num_cpus=1, scheduling_strategy="SPREAD", max_restarts=0)
        cls = remote(ProbeWorkerActor)
        self._actors = [cls.remote(w, self.setup) for w in range(self.n)]
        try:
            infos = await asyncio.wait_for(
                asyncio.gather(*(a.open.remote() for a in self._actors)), START_TIMEOUT_S
            )
        except TimeoutError:
            raise FleetError(
                f"--workers: the Ray cluster did not start {self.n} workers (one CPU each) "
                f"within {START_TIMEOUT_S:g} s"
            ) from None
        for state, (pid, clock, host), actor in zip(self.workers, infos, self._actors, strict=True):
            state.pid, state.clock, state.host = pid, clock, host
            pings = []
            for _ in range(CLOCK_PINGS):
                t0 = time.perf_counter_ns()
                tw = await actor.clock.remote()
                pings.append((t0, tw, time.perf_counter_ns()))
            state.fit = ClockFit.from_pings(pings)
        self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        """Every POLL_S, what each live actor has handed back; a failed call is a lost worker."""
        while True:
            live = [(w, a) for w, a in enumerate(self._actors) if self.workers[w].lost is None]
            got = await asyncio.gather(*(a.drain.remote() for _, a in live), return_exceptions=True)
            for (w, _), batch in zip(live, got, strict=True):
                if isinstance(batch, BaseException):
                    why = f"worker {w} (Ray actor, pid {self.workers[w].pid} on "
                    why += f"{self.workers[w].host}) died mid-run: {type(batch).__name__}"
                    self.workers[w].lost = why
                    self.events.put_nowait((w, "lost", why))
                    continue
                for kind, payload in batch:
                    self.events.put_nowait((w, kind, payload))
            await asyncio.sleep(POLL_S)

    async def _job(self, share: Share) -> None:
        self._runs.append(self._actors[share.worker].run.remote(share))

    async def _stop(self, worker: int) -> None:
        await self._actors[worker].stop.remote()

    async def _close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        import ray

        for state, actor in zip(self.workers, self._actors, strict=False):
            if state.lost is None:
                with contextlib.suppress(Exception):
                    state.record = await asyncio.wait_for(actor.close.remote(), CLOSE_TIMEOUT_S)
            with contextlib.suppress(Exception):
                ray.kill(actor)
        if self._owns_ray:
            ray.shutdown()
