"""From a request's step events to what goes on the wire, as SGLang and llama.cpp do it.

- Default: one emission per verify step (all the step's tokens together).
- stream_interval N > 1 (SGLang): emit only when completion_tokens % N == 0 or at the end; since
  a speculative step adds several tokens, multiples are skipped and chunks merge steps.
- Steps that pile up while the handler is busy are coalesced into one emission (SGLang's
  tokenizer manager keeps only the latest output; vLLM merges queued outputs).
- per_token_events (llama.cpp): every token is its own event; a step's tokens leave as a burst.
Also records TTFT / inter-token latency / e2e the way SGLang observes them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from specscope.serve.metrics import ServeMetrics
from specscope.serve.scheduler import ErrorEvent, RequestState, StepEvent

T = TypeVar("T")


@dataclass
class Emission:
    tokens: list[int]
    completion_tokens: int  # cumulative after this emission
    finished: bool = False
    finish_reason: str | None = None  # "length" | "stop" | "abort"


async def first_event(state: RequestState) -> StepEvent | ErrorEvent:
    """Wait for the request's first step (or its admission error) before any header is sent,
    so that an admission failure is a proper HTTP error status."""
    return await state.events.get()


async def emissions(
    state: RequestState,
    first: StepEvent,
    metrics: ServeMetrics,
    stream_interval: int = 1,
    per_token_events: bool = False,
) -> AsyncIterator[Emission]:
    """Emissions until the request finishes. An ErrorEvent mid-stream ends it as "abort"."""
    pending: list[int] = []
    sent = 0
    last_emit: float | None = None
    event: StepEvent | ErrorEvent | None = first
    while True:
        batch: list[StepEvent | ErrorEvent] = [event] if event is not None else []
        while not state.events.empty():
            batch.append(state.events.get_nowait())
        finished = False
        reason: str | None = None
        ready_upto = 0  # pending tokens that end on an emission point (SGLang: a multiple of N)
        for ev in batch:
            if isinstance(ev, ErrorEvent):
                finished, reason = True, "abort"
                break
            pending += ev.tokens
            if (sent + len(pending)) % stream_interval == 0:
                ready_upto = len(pending)
            if ev.finished:
                finished, reason = True, ev.finish_reason
                break
        if finished:
            ready_upto = len(pending)
        if ready_upto or finished:
            # Steps that piled up coalesce into one emission, but only up to the last emission
            # point: SGLang's tokenizer manager keeps the latest *sent* output, so a chunk never
            # ends between multiples of the stream interval (tokens after it wait for the next).
            now = time.perf_counter()
            ready, pending = pending[:ready_upto], pending[ready_upto:]
            n = len(ready)
            if n:
                if last_emit is None:
                    metrics.ttft.observe(now - state.t_arrival)
                else:
                    per_token = (now - last_emit) / n
                    for _ in range(n):
                        metrics.itl.observe(per_token)
                last_emit = now
            if per_token_events and n > 1:
                for i, tok in enumerate(ready):
                    last = i == n - 1
                    yield Emission([tok], sent + i + 1, finished and last, reason if last else None)
            else:
                yield Emission(ready, sent + n, finished, reason)
            sent += n
        if finished:
            metrics.e2e.observe(time.perf_counter() - state.t_arrival)
            return
        event = await state.events.get()


async def wait_or_disconnect(
    future: asyncio.Future[T], is_disconnected: Callable[[], Awaitable[bool]], poll_s: float = 0.1
) -> T | None:
    """Await a future, but return None early when the client disconnects. Starlette cancels a
    streaming body on disconnect by itself; a handler still waiting has to look."""
    while True:
        done, _ = await asyncio.wait({future}, timeout=poll_s)
        if done:
            return future.result()
        if await is_disconnected():
            future.cancel()
            return None
