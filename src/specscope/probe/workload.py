"""The one request runner: many requests, at most `concurrency` in flight, each trace handed
over the moment it ends.

Each worker is one concurrency slot (recorded on the trace); workers pull the next request from
a shared list, so a slow request never holds the others back. The number of requests is the
length of the list: bounded by construction. `probe` and the experiment executor (`diagnose`)
both run their requests here, so both keep the same promise: every finished request is handed
to `on_done` (appended to `requests.jsonl`) as it ends, and on Ctrl-C every request in flight is
handed over too, marked `cancelled`, with what it had received.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from specscope.trace.model import CANCELLED, ErrorInfo, RequestSpec, RequestTrace

MAX_CONCURRENCY = 1024


class Sender(Protocol):
    """What the runner sends through: the probe's client, or an experiment `Target`. A sender
    that keeps `in_flight` (index -> partial trace, as ProbeClient does) lets an interrupted
    request keep the chunks it had received."""

    async def send(self, spec: RequestSpec, index: int = 0, slot: int = 0) -> RequestTrace: ...


async def run_workload(
    client: Sender,
    specs: Sequence[RequestSpec],
    concurrency: int = 1,
    on_done: Callable[[RequestTrace], None] | None = None,
    *,
    first_index: int = 0,
    stop: Callable[[], bool] | None = None,
) -> list[RequestTrace]:
    """All traces that ran, in request order. Request `i` gets index `first_index + i`.
    `stop`, checked before each request starts, ends the run early (a server that stopped
    answering); the requests already in flight finish first."""
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be within 1..{MAX_CONCURRENCY}, got {concurrency}")
    results: list[RequestTrace | None] = [None] * len(specs)
    started: dict[int, tuple[RequestSpec, int, int]] = {}  # index -> (spec, slot, t_send_ns)
    next_i = 0

    async def worker(slot: int) -> None:
        nonlocal next_i
        while next_i < len(specs) and not (stop is not None and stop()):
            i = next_i
            next_i += 1
            index = first_index + i
            started[index] = (specs[i], slot, time.perf_counter_ns())
            trace = await client.send(specs[i], index=index, slot=slot)
            trace.index, trace.concurrency_slot = index, slot
            del started[index]
            results[i] = trace
            if on_done is not None:
                on_done(trace)

    n_workers = min(concurrency, len(specs))
    try:
        async with asyncio.TaskGroup() as tg:
            for slot in range(n_workers):
                tg.create_task(worker(slot))
    except asyncio.CancelledError:
        # Ctrl-C: hand over what the requests in flight received, marked cancelled.
        partial = getattr(client, "in_flight", {})
        for index, (spec, slot, t_send) in sorted(started.items()):
            trace = partial.get(index) or RequestTrace(
                index=index, spec=spec, t_send_ns=t_send, concurrency_slot=slot
            )
            if trace.error is None:
                trace.error = ErrorInfo(kind=CANCELLED, message="run interrupted")
            if trace.t_end_ns is None:
                trace.t_end_ns = time.perf_counter_ns()
            if on_done is not None:
                on_done(trace)
        raise
    return [r for r in results if r is not None]
