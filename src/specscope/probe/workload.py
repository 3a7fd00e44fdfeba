"""Run many requests with at most `concurrency` in flight, handing each trace over as it ends.

Each worker is one concurrency slot (recorded on the trace); workers pull the next request from
a shared list, so a slow request never holds the others back. The number of requests is the
length of the list: bounded by construction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from specscope.probe.client import ProbeClient
from specscope.trace.model import ErrorInfo, RequestSpec, RequestTrace

MAX_CONCURRENCY = 1024


async def run_workload(client: ProbeClient, specs: Sequence[RequestSpec], concurrency: int = 1,
                       on_done: Callable[[RequestTrace], None] | None = None) -> list[RequestTrace]:
    """All traces, in request order. `on_done` sees each trace the moment it finishes (the
    command appends it to `requests.jsonl` there, so an interrupted run keeps what it measured)."""
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be within 1..{MAX_CONCURRENCY}, got {concurrency}")
    results: list[RequestTrace | None] = [None] * len(specs)
    next_index = 0

    async def worker(slot: int) -> None:
        nonlocal next_index
        while next_index < len(specs):
            i = next_index
            next_index += 1
            trace = await client.send(specs[i], index=i, slot=slot)
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
        for trace in list(client.in_flight.values()):
            if trace.error is None:
                trace.error = ErrorInfo(kind="cancelled", message="run interrupted")
            if on_done is not None:
                on_done(trace)
        raise
    return [r for r in results if r is not None]
