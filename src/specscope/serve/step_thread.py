"""The step loop off the event loop, for a backend whose step is synchronous (the engine).

Why: awaiting `asyncio.to_thread(step)` puts the event loop on the step's critical path: the
next step starts only once the loop (busy with HTTP and SSE for every stream) gets round to
resuming the scheduler, which cost the engine up to 3.9 ms a step at C = 64 on the H200
(ARCHITECTURE §7.1). Here one loop (`StepLoop`) admits, prefills, steps and reaps back to back,
and each pass's outcome goes to the event loop in one `StepReport` (all requests' events
together), so the event loop only does the counting, the logging and the streaming, off the
step's path. `StepThread` runs it on a thread of the server's process; engine_process.py runs
the same loop in a process of its own, where the event loop's Python no longer holds the
interpreter lock the engine needs.

A server's host faults (faults.py) are output processing in this loop: `run_step_work` runs
each request's after the step and before the hand-off, on the step's path as in a scheduler that
renders its requests' text itself.

Where the backend offers it (the engine's plain greedy decoding on CUDA, engine/overlap.py), a
pass launches the next step before it finishes the one in flight, so the host's per-request
work on step n runs while the device computes step n + 1 (SGLang's overlap scheduler); each
report then carries the step before the one just launched. A host fault turns it off (its work
is what the next step must wait for).

Whoever runs the loop owns the requests it steps (`active`); the event loop never releases them
itself, it marks them cancelled and the loop frees them at its next step boundary. Counters and
events stay on the event loop, as in the async path (`Scheduler`), so that /metrics, logs and
streams read one state.
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

    def prefill_many_locked(
        self, items: list[tuple[str, list[int], SamplingParams]]
    ) -> None: ...  # all or none

    def step_locked(self, request_ids: list[str]) -> BatchStep: ...

    def release(self, request_id: str) -> None: ...


@runtime_checkable
class Overlapping(Protocol):
    """A backend whose plain decode steps can overlap (engine/overlap.py): `launch_locked`
    starts a step without waiting for it, `finish_locked` commits a launched one. `overlap`
    False: it steps synchronously only."""

    overlap: bool

    def launch_locked(self, request_ids: list[str], previous: Any) -> Any: ...

    def finish_locked(self, launched: Any) -> BatchStep: ...


@dataclass
class StepReport:
    """What one pass of the step loop did, delivered to the event loop in one call. Requests
    are named by id, so that the same report crosses a process boundary as it is (pickled:
    ids, the batch's outputs, floats) when the loop runs in an engine process of its own."""

    admitted: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str, int]] = field(default_factory=list)  # (id, message, status)
    reaped: list[str] = field(default_factory=list)  # cancelled requests freed or dropped
    batch: BatchStep | None = None
    wait_s: float = 0.0  # the step call's time beyond the backend's own
    between_s: float = 0.0  # from the previous step's end to this one's start (0: first step)
    post_s: float = 0.0  # after the step, up to the hand-off (step work, freeing finished ones)
    prefill_s: float = 0.0  # admitting and prefilling requests before this step
    error: str | None = None  # the step raised: every request it held has been freed
    failed: list[str] = field(default_factory=list)
    fatal: bool = False  # the step loop is gone (its process died): every request fails

    def __bool__(self) -> bool:
        return bool(self.admitted or self.rejected or self.reaped or self.batch or self.error)


@runtime_checkable
class StepDriver(Protocol):
    """What the scheduler asks of a step loop that runs off the event loop (a thread here, or
    an engine process: engine_process.py): requests in, cancellations, a bounded stop. Each
    pass comes back as one StepReport through the callback it was started with."""

    lost: str | None  # why the loop is gone (None while it runs): new requests fail at once

    def submit(self, state: RequestState) -> None: ...

    def cancel(self, request_id: str) -> None: ...

    def stop(self) -> None: ...


@runtime_checkable
class OwnsStepLoop(Protocol):
    """A backend that runs its step loop itself (the engine in a process of its own): the
    scheduler hands it the report callback instead of stepping it."""

    def start_steps(
        self,
        report: Callable[[StepReport], None],
        post: Callable[[Callable[[StepReport], None], StepReport], None],
        max_batch: int,
        faults: Any,
    ) -> StepDriver: ...


class StepLoop:
    """One pass at a time: reap cancelled requests, admit and prefill waiting ones, step the
    batch, run each request's step work, free finished ones. Used by the step thread below and,
    unchanged, by the engine process's main loop; whoever runs it owns the requests in it."""

    def __init__(
        self,
        backend: ThreadSteppable,
        waiting: Any,
        max_batch: int,
        step_work: bool = False,  # a host fault is on: run each request's step work per step
    ):
        self.backend = backend
        self.step_work = step_work
        self.waiting = waiting  # a deque: append by the submitter, popleft here (both atomic)
        self.max_batch = max_batch
        self.active: dict[str, RequestState] = {}
        self._step_ended: float | None = None
        # Overlapped steps where the backend offers them, except under a host fault: its
        # output processing models work the next step waits for (docs/faults.md), and an
        # overlap would hide what costs less than the device's step.
        self.overlap = not step_work and isinstance(backend, Overlapping) and bool(backend.overlap)
        self._in_flight: Any = None  # the overlapped step launched and not yet finished

    @property
    def busy(self) -> bool:
        return bool(self.active or self.waiting)

    def run_pass(self) -> StepReport:
        """One pass; an empty report (falsy) when there was nothing to do."""
        if not self.busy:
            self._step_ended = None  # idle time is not time between steps
            return StepReport()
        report = StepReport()
        self._reap(report)
        t0 = time.perf_counter()
        self._admit(report)
        report.prefill_s = time.perf_counter() - t0
        self._reap(report)
        if self.active:
            self._step(report)
        return report

    def release_all(self) -> None:
        for rid in list(self.active):
            self.backend.release(rid)
        self.active.clear()
        self._in_flight = None

    def _reap(self, report: StepReport) -> None:
        for rid, state in list(self.active.items()):
            if state.cancelled:
                del self.active[rid]
                self.backend.release(rid)
                report.reaped.append(rid)

    def _admit(self, report: StepReport) -> None:
        """Every request waiting at this boundary, as far as the batch has room, prefilled in
        one call: one prefill forward per request stalled every running stream once per
        arrival (at C = 256 on the H200 the last of 256 requests started after ~11 s; SGLang
        and vLLM batch their prefills too). The call is all or none: when it fails, each
        request is prefilled alone so that only the one at fault is rejected."""
        group: list[RequestState] = []
        while self.waiting and len(self.active) + len(group) < self.max_batch:
            state = self.waiting.popleft()
            if state.cancelled:
                report.reaped.append(state.request_id)
            else:
                group.append(state)
        if len(group) > 1 and self._prefill_together(group):
            for state in group:
                self.active[state.request_id] = state
                report.admitted.append(state.request_id)
            return
        for state in group:
            self._admit_one(state, report)

    def _prefill_together(self, group: list[RequestState]) -> bool:
        try:
            self.backend.prefill_many_locked(
                [(s.request_id, s.prompt_ids, s.params) for s in group]
            )
        except Exception:  # each is tried alone next, and gets its own verdict
            return False
        return True

    def _admit_one(self, state: RequestState, report: StepReport) -> None:
        rid = state.request_id
        try:
            self.backend.prefill_locked(rid, state.prompt_ids, state.params)
        except BackendError as exc:
            self.backend.release(rid)
            report.rejected.append((rid, str(exc), exc.status))
            return
        except Exception as exc:  # a backend bug fails this request, not the server
            self.backend.release(rid)
            report.rejected.append((rid, f"internal error: {type(exc).__name__}", 500))
            return
        self.active[rid] = state
        report.admitted.append(rid)

    def _step(self, report: StepReport) -> None:
        ids = list(self.active)
        t0 = time.perf_counter()
        if self._step_ended is not None:
            report.between_s = max(0.0, t0 - self._step_ended - report.prefill_s)
        try:
            if self.overlap:
                batch, backend_s = self._advance(ids)
            else:
                batch = self.backend.step_locked(ids)
                backend_s = batch.step_s
            t1 = time.perf_counter()
            if self.step_work and batch is not None:  # without a fault, no per-request pass
                run_step_work(batch, self.active)
        except Exception as exc:  # a backend bug fails its requests, never the server
            report.error = f"{type(exc).__name__}: {exc}"
            report.failed = list(self.active)
            for rid in ids:
                self.backend.release(rid)
            self.active.clear()
            self._step_ended = None
            self._in_flight = None
            return
        if batch is None:  # the first overlapped step is launched: nothing to hand over yet
            self._step_ended = time.perf_counter()
            return
        report.batch = batch
        report.wait_s = max(0.0, t1 - t0 - backend_s)
        for out in batch.outputs:
            if out.finished and out.request_id in self.active:
                del self.active[out.request_id]
                self.backend.release(out.request_id)
        if not self.active:
            self._in_flight = None  # what it holds was freed: its tokens are nobody's
        self._step_ended = time.perf_counter()
        report.post_s = self._step_ended - t1

    def _advance(self, ids: list[str]) -> tuple[BatchStep | None, float]:
        """An overlapped pass: launch the next step, then finish the one in flight (its
        outputs are this pass's batch; None after the first launch). A batch that cannot
        overlap (a request that samples) first finishes the step in flight, and is stepped
        synchronously from the next pass on; so is one where nothing could be launched.
        Also the backend's own time in this pass: this launch and that finish. (The batch's
        `step_s` is its own step's launch, a pass earlier, and finish: the time it cost, not
        this pass's; the wait beyond a pass is measured against the pass.)"""
        launched = self.backend.launch_locked(ids, self._in_flight)
        launch_s = launched.launch_s if launched is not None else 0.0
        previous = self._in_flight
        self._in_flight = launched if launched is not None and launched.requests else None
        if previous is not None:
            batch = self.backend.finish_locked(previous)
            return batch, launch_s + batch.step_s - previous.launch_s
        if self._in_flight is None:
            batch = self.backend.step_locked(ids)
            return batch, launch_s + batch.step_s
        return None, launch_s


class StepThread:
    """The step loop on a thread of this process: pass after pass while anything runs, each
    report posted to the event loop. One per server."""

    lost: str | None = None  # a thread does not die on a backend error (StepLoop catches it)

    def __init__(
        self,
        backend: ThreadSteppable,
        waiting: Any,  # a deque of requests to admit (the thread pops them)
        max_batch: int,
        report: Callable[[StepReport], None],  # called on the loop (call_soon_threadsafe)
        post: Callable[[Callable[[StepReport], None], StepReport], None],
        step_work: bool = False,
    ):
        self.loop = StepLoop(backend, waiting, max_batch, step_work)
        self._report = report
        self._post = post
        self._kick = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="specscope-step", daemon=True)

    @property
    def active(self) -> dict[str, RequestState]:
        return self.loop.active

    def start(self) -> None:
        self._thread.start()

    def submit(self, state: RequestState) -> None:
        self.loop.waiting.append(state)
        self._kick.set()

    def cancel(self, request_id: str) -> None:
        """The request is marked cancelled (the state is shared): wake the thread to free it."""
        self._kick.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current step and free what the thread held (blocking: call it from a
        worker thread)."""
        self._stopping = True
        self._kick.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.loop.release_all()

    def _run(self) -> None:
        while not self._stopping:
            if not self.loop.busy:
                self.loop.run_pass()  # marks the idle gap
                self._kick.wait(0.5)
                self._kick.clear()
                continue
            report = self.loop.run_pass()
            if report:
                self._post(self._report, report)
