"""The step loop on a thread of its own, for a backend whose step is synchronous (the engine).

Why: awaiting `asyncio.to_thread(step)` puts the event loop on the step's critical path: the
next step starts only once the loop (busy with HTTP and SSE for every stream) gets round to
resuming the scheduler, which cost the engine up to 3.9 ms a step at C = 64 on the H200
(ARCHITECTURE §7.1). Here one thread admits, prefills, steps and reaps back to back, and hands
each step's outcome to the loop in one `call_soon_threadsafe` (all requests' events together),
so the loop only does the counting, the logging and the streaming, off the step's path.

A server's host faults (faults.py) are output processing in this loop: `run_step_work` runs
each request's after the step and before the hand-off, on the step's path as in a scheduler that
renders its requests' text itself.

The thread owns the requests it steps (`active`); the loop never releases them itself, it marks
them cancelled and the thread frees them at its next step boundary. Counters and events stay on
the loop, as in the async path (`Scheduler`), so that /metrics, logs and streams read one state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from specscope.backend import BackendError, BatchStep, SamplingParams

# The scheduler's RequestState (request_id, prompt_ids, params, cancelled); not imported, so
# that scheduler.py can import this module.
RequestState = Any


def run_step_work(batch: BatchStep, states: Mapping[str, RequestState]) -> None:
    """Each request's output processing in the step loop (`state.step_work`, set only where a
    host fault is on): the next step waits for it, as it would in a scheduler that does it."""
    for out in batch.outputs:
        state = states.get(out.request_id)
        work = None if state is None else state.step_work
        if work is not None:
            work.add(out.tokens, out.finished)


@runtime_checkable
class ThreadSteppable(Protocol):
    """A backend that can be driven synchronously from one thread (the engine does; the twin,
    whose step is an asyncio sleep on its clock, does not and keeps the async path)."""

    def prefill_locked(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> None: ...

    def step_locked(self, request_ids: list[str]) -> BatchStep: ...

    def release(self, request_id: str) -> None: ...


@dataclass
class StepReport:
    """What one pass of the thread did, delivered to the loop in one call."""

    admitted: list[RequestState] = field(default_factory=list)
    rejected: list[tuple[RequestState, str, int]] = field(default_factory=list)
    reaped: list[str] = field(default_factory=list)  # cancelled requests freed
    batch: BatchStep | None = None
    wait_s: float = 0.0  # the step call's time beyond the backend's own
    between_s: float = 0.0  # from the previous step's end to this one's start (0: first step)
    post_s: float = 0.0  # after the step, up to the hand-off (step work, freeing finished ones)
    error: str | None = None  # the step raised: every request it held has been freed
    failed: list[RequestState] = field(default_factory=list)


class StepThread:
    """Admit, prefill, step, reap, report; again, while anything runs. One per server."""

    def __init__(
        self,
        backend: ThreadSteppable,
        waiting: Any,  # the scheduler's deque (append on the loop, popleft here: both atomic)
        max_batch: int,
        report: Callable[[StepReport], None],  # called on the loop (call_soon_threadsafe)
        post: Callable[[Callable[[StepReport], None], StepReport], None],
        step_work: bool = False,  # a host fault is on: run each request's step work per step
    ):
        self.backend = backend
        self.step_work = step_work
        self.waiting = waiting
        self.max_batch = max_batch
        self._report = report
        self._post = post
        self.active: dict[str, RequestState] = {}
        self._kick = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="specscope-step", daemon=True)
        self._step_ended: float | None = None

    def start(self) -> None:
        self._thread.start()

    def kick(self) -> None:
        """Something arrived or was cancelled: wake the thread if it idles."""
        self._kick.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current step and free what the thread held (blocking: call it from a
        worker thread)."""
        self._stopping = True
        self._kick.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        for rid in list(self.active):
            self.backend.release(rid)
        self.active.clear()

    def _run(self) -> None:
        while not self._stopping:
            if not self.active and not self.waiting:
                self._step_ended = None  # idle time is not time between steps
                self._kick.wait(0.5)
                self._kick.clear()
                continue
            report = StepReport()
            self._reap(report)
            self._admit(report)
            self._reap(report)
            if self.active:
                self._step(report)
            if report.admitted or report.rejected or report.reaped or report.batch or report.error:
                self._post(self._report, report)

    def _reap(self, report: StepReport) -> None:
        for rid, state in list(self.active.items()):
            if state.cancelled:
                del self.active[rid]
                self.backend.release(rid)
                report.reaped.append(rid)

    def _admit(self, report: StepReport) -> None:
        while self.waiting and len(self.active) < self.max_batch:
            state = self.waiting.popleft()
            if state.cancelled:
                continue
            try:
                self.backend.prefill_locked(state.request_id, state.prompt_ids, state.params)
            except BackendError as exc:
                self.backend.release(state.request_id)
                report.rejected.append((state, str(exc), exc.status))
                continue
            except Exception as exc:  # a backend bug fails this request, not the server
                self.backend.release(state.request_id)
                report.rejected.append((state, f"internal error: {type(exc).__name__}", 500))
                continue
            self.active[state.request_id] = state
            report.admitted.append(state)

    def _step(self, report: StepReport) -> None:
        ids = list(self.active)
        t0 = time.perf_counter()
        if self._step_ended is not None:
            report.between_s = t0 - self._step_ended
        try:
            batch = self.backend.step_locked(ids)
            t1 = time.perf_counter()
            if self.step_work:  # without a fault, no per-request pass on the step's path
                run_step_work(batch, self.active)
        except Exception as exc:  # a backend bug fails its requests, never the server
            report.error = f"{type(exc).__name__}: {exc}"
            report.failed = list(self.active.values())
            for rid in ids:
                self.backend.release(rid)
            self.active.clear()
            self._step_ended = None
            return
        report.batch = batch
        report.wait_s = max(0.0, t1 - t0 - batch.step_s)
        for out in batch.outputs:
            if out.finished and out.request_id in self.active:
                del self.active[out.request_id]
                self.backend.release(out.request_id)
        self._step_ended = time.perf_counter()
        report.post_s = self._step_ended - t1
