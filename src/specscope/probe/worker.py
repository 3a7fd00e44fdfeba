"""One probe worker: its share of the load, run on its own event loop (issue #37).

A Python process reads a limited number of chunks a second on time (bench/client_capacity.py);
past that its loop answers late and the lateness is read as step time. `probe --workers N`
therefore spreads the load over N processes, local (probe/workers.py) or Ray actors
(probe/ray_workers.py). Both run the same thing here: `WorkerCore` holds a worker's session,
client and loop-lag monitor for the whole probe and runs each share of requests through the one
request runner (`probe.workload.run_workload`), so a worker measures exactly as a single-process
probe does.

The split (`split_shares`) is the single-process run cut along its concurrency slots: slots
0..C-1 are dealt out in contiguous blocks (C // N each, the first C % N workers one more), and
request i goes to the worker owning slot i mod C, as a single process' request i first fills
slot i mod C. The request indices, prompts and slots are the single run's; with `--repeat R`
every worker gets exactly R requests per slot.

Clocks: every stamp is `time.perf_counter_ns()` (CLOCK_MONOTONIC), which all processes of one
kernel boot share, so a local worker's stamps are the driver's. Across hosts the bases differ:
the driver measures each worker's offset by ping-pong at start (NTP's midpoint: the worker's
stamp against the midpoint of the driver's send and receive, the round trip with the least
delay of `CLOCK_PINGS`; its half is the uncertainty) and shifts that worker's stamps onto its
own clock (`shift_trace`). Offsets only place requests of different workers on one time line
(the lag samples' decode windows, the batch a step served, server-log alignment); the gaps
within one request, which the step times are, come from one clock and never move.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from specscope.probe.client import ProbeClient, Timeouts, new_session
from specscope.probe.flavors.base import Flavor
from specscope.probe.health import LoopLagMonitor
from specscope.probe.prompts import delta_counter
from specscope.probe.workload import run_workload
from specscope.trace.model import ErrorInfo, RequestSpec, RequestTrace
from specscope.trace.text import scrub_tree

MAX_WORKERS = 256
CLOCK_PINGS = 8
#: Error kind of a request its worker never handed back (the worker died or did not answer).
WORKER_LOST = "worker_lost"
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker needs to build the probe's client (picklable: it crosses processes)."""

    url: str
    flavor: Flavor
    timeouts: Timeouts
    api_key: str | None = None
    auth: aiohttp.BasicAuth | None = None
    local_count: Callable[..., int] | None = None  # --tokenizer: counts streamed delta text

    def client(self, session: aiohttp.ClientSession) -> ProbeClient:
        """The probe's own client (as `connect.Connection.client` builds it)."""
        counter = delta_counter(self.local_count) if self.local_count is not None else None
        return ProbeClient(
            self.url, self.flavor, timeouts=self.timeouts, counter=counter, session=session
        )


@dataclass(frozen=True)
class Share:
    """One worker's part of one batch of requests: the single run's indices and specs, its
    slots (`concurrency` of them, numbered from `slot_offset` in the single run)."""

    worker: int
    indices: tuple[int, ...]
    specs: tuple[RequestSpec, ...]
    concurrency: int
    slot_offset: int


def slot_blocks(workers: int, concurrency: int) -> list[tuple[int, int]]:
    """(first slot, slots) of each worker: contiguous blocks, the first C % N one larger."""
    base, extra = divmod(concurrency, workers)
    blocks, start = [], 0
    for w in range(workers):
        n = base + (w < extra)
        blocks.append((start, n))
        start += n
    return blocks


def split_shares(
    workers: Sequence[int], specs: Sequence[RequestSpec], concurrency: int, first_index: int = 0
) -> list[Share]:
    """The batch cut across `workers` (their ids) along the slots; request i (index
    first_index + i) goes to the worker owning slot i mod `concurrency`. Workers whose
    block is empty get no share; a share may hold no requests (fewer requests than slots)."""
    owner: dict[int, int] = {}
    shares: list[tuple[int, int, int]] = []
    for w, (start, n) in zip(workers, slot_blocks(len(workers), concurrency), strict=True):
        if n:
            shares.append((w, start, n))
            owner.update(dict.fromkeys(range(start, start + n), w))
    picked: dict[int, list[int]] = {w: [] for w, _, _ in shares}
    for i in range(len(specs)):
        picked[owner[i % concurrency]].append(i)
    return [
        Share(
            worker=w,
            indices=tuple(first_index + i for i in picked[w]),
            specs=tuple(specs[i] for i in picked[w]),
            concurrency=n,
            slot_offset=start,
        )
        for w, start, n in shares
    ]


def parse_trace(line: str) -> RequestTrace:
    """A shipped trace back (lone-surrogate escapes read as escape text, as the reader does)."""
    try:
        return RequestTrace.model_validate_json(line)
    except ValueError:
        return RequestTrace.model_validate(scrub_tree(json.loads(line)))


def shift_trace(trace: RequestTrace, offset_ns: int) -> RequestTrace:
    """Moves every stamp of a worker's trace onto the driver's clock (in place)."""
    if offset_ns:
        trace.t_send_ns += offset_ns
        if trace.t_end_ns is not None:
            trace.t_end_ns += offset_ns
        for c in trace.chunks:
            c.t_ns += offset_ns
    return trace


def clock_identity() -> str:
    """Which CLOCK_MONOTONIC this process reads: the kernel's boot id (every process of one
    boot, containers included, shares it), else the host name."""
    with contextlib.suppress(OSError):
        return _BOOT_ID.read_text().strip()
    return socket.gethostname()


@dataclass
class ClockFit:
    """A worker's clock against the driver's: `offset_ns` is added to its stamps to read them
    on the driver's clock; `uncertainty_ns` is half the least round trip."""

    offset_ns: int = 0
    uncertainty_ns: int = 0

    @classmethod
    def from_pings(cls, pings: Sequence[tuple[int, int, int]]) -> ClockFit:
        """(driver send, worker stamp, driver receive) triples: the least delayed one's
        midpoint against the worker's stamp."""
        t0, tw, t1 = min(pings, key=lambda p: p[2] - p[0])
        return cls(offset_ns=(t0 + t1) // 2 - tw, uncertainty_ns=(t1 - t0 + 1) // 2)


def lost_trace(
    index: int, spec: RequestSpec, slot: int, why: str, kind: str = WORKER_LOST
) -> RequestTrace:
    """A request its worker never handed back, recorded as an error (never dropped)."""
    now = time.perf_counter_ns()
    return RequestTrace(
        index=index,
        spec=spec,
        t_send_ns=now,
        t_end_ns=now,
        concurrency_slot=slot,
        error=ErrorInfo(kind=kind, message=why),
    )


class WorkerCore:
    """Inside one worker: the session, the client and the loop-lag monitor, open for the whole
    probe (`async with`), and `run(share, ship)` for each batch."""

    def __init__(self, worker: int, setup: WorkerSetup) -> None:
        self.worker = worker
        self.setup = setup
        self.lag = LoopLagMonitor(worker=worker)
        self._stack = contextlib.AsyncExitStack()
        self._client: ProbeClient | None = None

    async def __aenter__(self) -> WorkerCore:
        await self._stack.enter_async_context(self.lag)
        s = self.setup
        session = await self._stack.enter_async_context(new_session(s.timeouts, s.api_key, s.auth))
        self._client = await self._stack.enter_async_context(s.client(session))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()
        self.lag.stop()

    async def run(self, share: Share, ship: Callable[[RequestTrace], None]) -> None:
        """The share's requests through the request runner, each trace handed to `ship` as it
        ends with the single run's index and slot (on cancellation: those in flight, marked
        cancelled, as run_workload does)."""
        assert self._client is not None, "use `async with WorkerCore(...)`"

        def done(trace: RequestTrace) -> None:
            trace.index = share.indices[trace.index]
            trace.concurrency_slot += share.slot_offset
            ship(trace)

        await run_workload(self._client, share.specs, share.concurrency, done)

    def record(self) -> dict[str, Any]:
        """This worker's lag samples (the `client.jsonl` line, on its own clock)."""
        return self.lag.record()
