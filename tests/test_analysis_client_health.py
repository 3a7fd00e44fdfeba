"""The client's timing health (analysis/client_health.py) and its guard in the diagnosis: lag
samples kept to the decode windows, percentiles from every worker's raw samples, and a client
that was late by more than a tenth of a step stopping the claims that rest on its stamps."""

from __future__ import annotations

import numpy as np
import pytest

from specscope.analysis.client_health import LIMIT_SHARE, client_health, decode_windows
from specscope.analysis.diagnosis.cards import BY_ID
from specscope.analysis.diagnosis.diagnose import analyze
from specscope.analysis.headline.headline import guarded_headline
from specscope.analysis.steps.reconstruct import reconstruct_steps
from specscope.analysis.summary import summarize
from specscope.telemetry.records import SpecRecord
from specscope.trace.model import Chunk, RequestSpec, RequestTrace
from specscope.twin import scenario as tw
from specscope.validation import virtual

MS = 1_000_000


def _trace(index: int, start_ms: float, steps: int, step_ms: float) -> RequestTrace:
    """A request whose first token comes at start_ms, then `steps` one-token chunks."""
    chunks = [Chunk(t_ns=int((start_ms + k * step_ms) * MS), n_tokens=1) for k in range(steps + 1)]
    return RequestTrace(
        index=index,
        spec=RequestSpec(prompt="the text", prompt_tokens=3, max_tokens=steps + 1),
        t_send_ns=int((start_ms - 50) * MS),
        chunks=chunks,
        token_count_source="usage",
        completion_tokens=steps + 1,
        finish_reason="length",
        t_end_ns=chunks[-1].t_ns,
    )


def _record(t_ms: list[float], lag_ms: list[float], worker: int = 0) -> dict:
    return {
        "worker": worker,
        "pid": 100 + worker,
        "period_s": 0.005,
        "t0_ns": 0,
        "t_us": [int(t * 1000) for t in t_ms],
        "lag_us": [int(v * 1000) for v in lag_ms],
    }


def test_windows_merge_where_requests_overlap():
    traces = [_trace(0, 100, 10, 10), _trace(1, 150, 10, 10), _trace(2, 1000, 5, 10)]
    assert decode_windows(traces).tolist() == [[100 * MS, 250 * MS], [1000 * MS, 1050 * MS]]


def test_only_samples_inside_decode_windows_count():
    traces = [_trace(0, 100, 50, 10)]  # decode from 100 ms to 600 ms
    t = list(np.arange(0, 1000, 5.0))
    # the loop stalls 40 ms between requests (outside the window) and answers in 0.2 ms inside
    lag = [40.0 if (ti < 100 or ti > 600) else 0.2 for ti in t]
    h = client_health([_record(t, lag)], traces, median_step_s=0.010)
    assert h is not None and h.during_decode
    assert h.lag_p99_s == pytest.approx(0.0002)
    assert not h.limits_step_time
    assert h.workers[0].to_json()["decode_samples"] == sum(1 for ti in t if 100 <= ti <= 600)
    assert "within 10% of a step" in h.reason


def test_a_late_loop_limits_the_step_time_and_says_by_how_much():
    traces = [_trace(0, 100, 50, 10)]
    t = list(np.arange(100, 600, 5.0))
    lag = [0.2, 0.2, 3.5] * 33 + [0.2]  # every third answer 3.3 ms beyond the loop's wake-up
    h = client_health([_record(t, lag)], traces, median_step_s=0.010)
    assert h.lag_p50_s == pytest.approx(0.0002)
    assert h.lag_excess_s == pytest.approx(33 * 0.0033 / 100)  # 1.09 ms
    assert h.lag_excess_s > LIMIT_SHARE * 0.010 and h.limits_step_time
    j = h.to_json()
    assert j["limits_step_time"] is True and j["limit_share"] == LIMIT_SHARE
    assert j["lag_excess_s"] == h.lag_excess_s
    assert "more than 10% of a step" in j["reason"] and "10.0 ms" in j["reason"]
    assert "0.20 ms at the median" in j["reason"] and "1.09 ms beyond it on average" in j["reason"]
    # the same lag against 50 ms steps is within the limit
    assert not client_health([_record(t, lag)], traces, median_step_s=0.050).limits_step_time


def test_the_wake_up_every_read_pays_does_not_limit():
    """A loop that answers in 0.2 ms with nothing ahead of it (the OS waking the thread: the
    H200 machine's idle client) shifts every stamp alike: 1.5 ms steps are not its."""
    traces = [_trace(0, 100, 50, 10)]
    t = list(np.arange(100, 600, 5.0))
    rng = np.random.default_rng(3)
    lag = list(0.19 + rng.gamma(2.0, 0.03, size=len(t)))  # 0.25 ms mean, a tenth of 2.5 ms
    h = client_health([_record(t, lag)], traces, median_step_s=0.0015)
    assert h.lag_mean_s > LIMIT_SHARE * 0.0015  # the mean lag alone would have fired
    assert h.lag_excess_s < LIMIT_SHARE * 0.0015 and not h.limits_step_time


def test_a_median_longer_than_a_wake_up_is_not_called_one():
    """Beside three threads spinning in the client's own interpreter its median lag was 7.7 ms:
    every read pays it, so it moves no gap, but it is not the OS's wake-up."""
    traces = [_trace(0, 100, 50, 30)]
    t = list(np.arange(100, 1600, 5.0))
    h = client_health([_record(t, [7.7] * len(t))], traces, median_step_s=0.030)
    assert not h.limits_step_time
    assert "longer than a wake-up" in h.reason and "the wake-up every read pays" not in h.reason
    quiet = client_health([_record(t, [0.2] * len(t))], traces, median_step_s=0.030)
    assert "0.20 ms at the median, the wake-up every read pays" in quiet.reason


def test_a_rare_scheduling_tail_does_not_limit():
    """One late answer in fifty (the OS's tail on a shared machine) is not a late client."""
    traces = [_trace(0, 100, 50, 10)]
    t = list(np.arange(100, 600, 5.0))
    lag = [0.2] * 98 + [5.0] * 2
    h = client_health([_record(t, lag)], traces, median_step_s=0.010)
    assert h.lag_p99_s > LIMIT_SHARE * 0.010  # the tail passes a tenth of a step
    assert not h.limits_step_time  # its excess (0.10 ms on average) does not


def test_percentiles_pool_every_workers_raw_samples():
    traces = [_trace(0, 0, 100, 10)]
    t = list(np.arange(0, 1000, 5.0))
    quiet, busy = _record(t, [0.1] * len(t), 0), _record(t, [2.0] * len(t), 1)
    h = client_health([quiet, busy], traces, median_step_s=0.010)
    assert [w.worker for w in h.workers] == [0, 1]
    assert h.lag_p50_s == pytest.approx(np.percentile([0.1e-3] * 200 + [2e-3] * 200, 50))
    assert h.workers[1].to_json()["lag_p99_s"] == pytest.approx(0.002)


def test_no_samples_is_no_health_and_a_malformed_line_is_skipped():
    traces = [_trace(0, 0, 10, 10)]
    assert client_health([], traces, 0.01) is None
    bad = {"worker": 0, "t0_ns": 0, "t_us": [1, 2, 3], "lag_us": [1]}
    assert client_health([bad], traces, 0.01) is None
    assert client_health([{"t_us": "x", "lag_us": None}], traces, 0.01) is None


def test_the_guard_stops_step_time_and_acceptance_claims_and_names_the_client_first():
    sc = tw.load_scenario("seed-regression")
    vr = virtual.virtual_run(
        lambda p, n, s: tw.simulate_request(sc, p, n, s),
        virtual.story_plan(),
        prefill=lambda p: tw.prefill_time(sc, p),
        seed=11,
        stream_interval=sc.streaming.stream_interval,
    )
    before = analyze(vr.run)
    timed = {c.id for c in BY_ID.values() if c.timed_by_client}
    assert timed & {f.id for f in before.findings}  # the story's decay and drift
    assert before.client is None  # no samples: no health, no guard
    reqs = vr.run.requests
    start = min(r.t_send_ns for r in reqs) / MS
    end = max(r.t_end_ns for r in reqs) / MS
    t = list(np.arange(start, end, 5.0))
    lag = [1.0] * len(t)  # steps of ~87 ms: 1 ms is within a tenth
    ok = analyze(vr.run.model_copy(update={"client": [_record(t, lag)]}))
    assert ok.client is not None and ok.client["limits_step_time"] is False
    assert [f.id for f in ok.findings] == [f.id for f in before.findings]
    lag = [0.2, 0.2, 40.0] * (len(t) // 3) + [0.2] * (len(t) % 3)  # held 40 ms, one in three
    late = analyze(vr.run.model_copy(update={"client": [_record(t, lag)]}))
    ids = [f.id for f in late.findings]
    assert ids[0] == "client_limited" and late.findings[0].cause == "client"
    assert not timed & set(ids)
    assert late.client["limits_step_time"] is True
    assert any("no step_time_drift: not made, the client was the limit" in n for n in late.notes)
    assert late.decode_tps == before.decode_tps and late.mean_commit_len == before.mean_commit_len
    assert "client" in late.verdict[0] or any("client" in v for v in late.verdict)


def _merged_stream() -> RequestTrace:
    """A request whose 100 decode tokens a late client read in 50 events of 1-3 tokens, 20 ms
    apart, where the server ran 60 steps (vLLM merges what its stream has not sent yet)."""
    sizes = [2, 1, 3, 2, 2] * 10
    chunks = [Chunk(t_ns=100 * MS, n_tokens=1)]
    chunks += [Chunk(t_ns=int((100 + 20 * k) * MS), n_tokens=n) for k, n in enumerate(sizes, 1)]
    return RequestTrace(
        index=0,
        spec=RequestSpec(prompt="the text", prompt_tokens=3, max_tokens=101),
        t_send_ns=50 * MS,
        chunks=chunks,
        token_count_source="usage",
        completion_tokens=101,
        finish_reason="length",
        t_end_ns=chunks[-1].t_ns,
    )


def test_a_limited_client_hands_the_commit_length_to_the_servers_counters():
    """Under load the vLLM peer's n-gram run read 2.1 tokens a step from a client that was the
    limit, where vLLM's counters said 1.85: the client's steps then lose the headline to the
    server's all-steps counters, and the headline says why."""
    trace = _merged_stream()
    recs = [reconstruct_steps(trace)]
    prom = SpecRecord(
        format="prometheus",
        scope="run_delta",
        fields={"delta": {"itl_count": 60.0, "generation_tokens": 101.0, "finished_requests": 1.0}},
    )
    t = list(np.arange(100, 1100, 5.0))
    calm = [_record(t, [0.2] * len(t))]
    late = [_record(t, ([0.2, 0.2, 12.0] * len(t))[: len(t)])]  # ~3.9 ms beyond, a 20 ms step
    agree = SpecRecord(
        format="prometheus",
        scope="run_delta",
        fields={"delta": {"itl_count": 50.0, "generation_tokens": 101.0, "finished_requests": 1.0}},
    )
    head, health = guarded_headline([trace], recs, calm, telemetry=[agree])
    assert not health.limits_step_time
    assert head.mean_commit_len_source == "client" and head.mean_commit_len == pytest.approx(2.0)
    # a calm client whose events held fewer steps than the server counted (50 for 60): its
    # events merged steps, which it says, and the server's counters give the commit length
    head, health = guarded_headline([trace], recs, calm, telemetry=[prom])
    assert not health.limits_step_time and head.mean_commit_len_source == "prometheus"
    assert any("server counted 60 verify steps where the stream's events held 50" in n
               for n in head.notes)  # fmt: skip
    head, health = guarded_headline([trace], recs, late, telemetry=[prom])
    assert health.limits_step_time
    assert head.mean_commit_len_source == "prometheus"
    assert head.mean_commit_len == pytest.approx(100 / 60)
    assert any("client was the limit" in n for n in head.notes)
    # without the server's counters the client's reading stays, and the guard's finding says it
    head, _ = guarded_headline([trace], recs, late)
    assert head.mean_commit_len_source == "client"
    # probe's summary reads the same figure and reports the same health
    s = summarize([trace], client=late, telemetry=[prom])
    assert s["mean_commit_len_source"] == "prometheus" and s["client"]["limits_step_time"]
