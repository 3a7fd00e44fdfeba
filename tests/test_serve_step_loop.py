"""The step loop's admission (serve/step_thread.py `StepLoop`): the requests waiting at a step
boundary are prefilled in one call, and a call that fails leaves each request its own verdict;
and its account of a pass's parts (/metrics' `specscope:step_*`).

The backend here records its calls; its step commits one token a request."""

from __future__ import annotations

from collections import deque

from specscope.backend import BackendError, BatchStep, SamplingParams, StepOutput
from specscope.serve.scheduler import RequestState
from specscope.serve.step_thread import StepLoop

BAD = [0]  # a prompt this backend refuses


class RecordingBackend:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.released: list[str] = []

    def prefill_locked(self, request_id, prompt_ids, params) -> None:
        self.calls.append(("one", [request_id]))
        if prompt_ids == BAD:
            raise BackendError("prompt refused", 400)

    def prefill_many_locked(self, items) -> None:
        self.calls.append(("many", [rid for rid, _, _ in items]))
        if any(ids == BAD for _, ids, _ in items):
            raise BackendError("prompt refused", 400)  # all or none: nothing admitted

    def step_locked(self, request_ids) -> BatchStep:
        return BatchStep([StepOutput(rid, [7]) for rid in request_ids], step_s=0.001)

    def release(self, request_id) -> None:
        self.released.append(request_id)


def _states(*prompts: list[int]) -> deque[RequestState]:
    params = SamplingParams(max_tokens=4)
    return deque(RequestState(f"r{i}", ids, params) for i, ids in enumerate(prompts))


def test_the_requests_waiting_at_a_boundary_are_prefilled_in_one_call():
    backend = RecordingBackend()
    loop = StepLoop(backend, _states([1, 2], [3], [4, 5, 6]), max_batch=8)
    report = loop.run_pass()
    assert backend.calls == [("many", ["r0", "r1", "r2"])]
    assert report.admitted == ["r0", "r1", "r2"]
    assert [o.request_id for o in report.batch.outputs] == ["r0", "r1", "r2"]


def test_the_batch_room_bounds_the_group_and_the_rest_waits():
    backend = RecordingBackend()
    loop = StepLoop(backend, _states([1], [2], [3]), max_batch=2)
    assert loop.run_pass().admitted == ["r0", "r1"]
    assert backend.calls == [("many", ["r0", "r1"])] and len(loop.waiting) == 1


def test_a_failed_group_call_leaves_each_request_its_own_verdict():
    backend = RecordingBackend()
    loop = StepLoop(backend, _states([1], BAD, [3]), max_batch=8)
    report = loop.run_pass()
    assert backend.calls[0] == ("many", ["r0", "r1", "r2"])
    assert backend.calls[1:] == [("one", ["r0"]), ("one", ["r1"]), ("one", ["r2"])]
    assert report.admitted == ["r0", "r2"]
    assert report.rejected == [("r1", "prompt refused", 400)]
    assert "r1" in backend.released and set(loop.active) == {"r0", "r2"}


def test_a_cancelled_request_is_dropped_before_the_prefill():
    backend = RecordingBackend()
    states = _states([1], [2])
    states[0].cancelled = True
    report = StepLoop(backend, states, max_batch=8).run_pass()
    assert report.reaped == ["r0"] and report.admitted == ["r1"]
    assert backend.calls == [("one", ["r1"])]  # one left: no group call


def test_a_prefill_between_steps_is_its_own_part_not_time_between():
    """/metrics' step parts: a request admitted while others run costs every stream its
    prefill; that time is `prefill_s`, not `between_s` (the loop's own overhead)."""
    import time

    class SlowPrefill(RecordingBackend):
        def prefill_locked(self, request_id, prompt_ids, params) -> None:
            time.sleep(0.05)

    waiting = _states([1])
    loop = StepLoop(SlowPrefill(), waiting, max_batch=8)
    first = loop.run_pass()
    waiting.append(RequestState("late", [2], SamplingParams(max_tokens=4)))
    second = loop.run_pass()
    assert first.prefill_s >= 0.05 and first.between_s == 0.0  # no step before the first
    assert second.admitted == ["late"] and second.prefill_s >= 0.05
    assert second.between_s < 0.05


def test_an_overlapped_pass_waits_only_beyond_its_own_launch_and_finish():
    """Under the overlap a pass launches step n + 1 and finishes step n, while the batch it
    hands over carries step n's own cost (its launch, a pass earlier, and its finish): the wait
    is measured against the pass. Launches that alternate 0 and 30 ms read ~15 ms of wait a pass
    against the batch's cost (the launch's variation, clipped at zero); against the pass, ~0."""
    import time
    from types import SimpleNamespace

    class VaryingLaunch(RecordingBackend):
        overlap = True

        def __init__(self) -> None:
            super().__init__()
            self.launches = 0

        def launch_locked(self, request_ids, previous):
            t0 = time.perf_counter()
            self.launches += 1
            if self.launches % 2 == 0:
                time.sleep(0.03)
            return SimpleNamespace(requests=list(request_ids), launch_s=time.perf_counter() - t0)

        def finish_locked(self, launched) -> BatchStep:
            outputs = [StepOutput(rid, [7]) for rid in launched.requests]
            return BatchStep(outputs, step_s=launched.launch_s)

    loop = StepLoop(VaryingLaunch(), _states([1]), max_batch=8)
    assert loop.overlap
    reports = [loop.run_pass() for _ in range(8)]
    handed = [r for r in reports if r.batch is not None]
    assert len(handed) == 7  # the first pass only launches
    assert sum(r.batch.step_s for r in handed) >= 0.09  # three launches of 30 ms were finished
    assert sum(r.wait_s for r in handed) < 0.045
