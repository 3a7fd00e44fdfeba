"""Serving metrics (TTFT, TPOT, per-token vs per-step latency, throughput, goodput, exports) on
synthetic traces whose every number is known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from specscope.analysis.serving import (
    PERCENTILES,
    REQUEST_COLUMNS,
    STEP_COLUMNS,
    SloError,
    bootstrap_ci,
    distribution,
    export_rows,
    parse_slo,
    serving_metrics,
    tpot_s,
)
from specscope.trace.model import Chunk, ErrorInfo, RequestSpec, RequestTrace, Run, RunInfo

MS = 1_000_000


def trace(
    commits: list[int],
    *,
    step_ms: float | list[float] = 40.0,
    ttft_ms: float = 100.0,
    send_ms: float = 0.0,
    index: int = 0,
    tag: str = "probe",
    tail_ms: float = 2.0,
    error: ErrorInfo | None = None,
) -> RequestTrace:
    """One chunk per verify step: the prefill token at send + ttft, then one chunk per commit."""
    steps = step_ms if isinstance(step_ms, list) else [step_ms] * len(commits)
    t = send_ms + ttft_ms
    chunks = [Chunk(t_ns=int(t * MS), n_tokens=1)]
    for c, s in zip(commits, steps, strict=True):
        t += s
        chunks.append(Chunk(t_ns=int(t * MS), n_tokens=c))
    return RequestTrace(
        index=index,
        spec=RequestSpec(prompt="def f():", prompt_tokens=50, tag=tag),
        t_send_ns=int(send_ms * MS),
        chunks=chunks,
        token_count_source="usage",
        completion_tokens=1 + sum(commits),
        t_end_ns=int((t + tail_ms) * MS),
        error=error,
    )


def test_request_latencies_exclude_ttft_and_stream_tail():
    tr = trace([3, 2, 4, 1], step_ms=40.0, ttft_ms=100.0, tail_ms=5.0)
    out = serving_metrics([tr])["run"]
    assert out["ttft_s"]["p50"] == pytest.approx(0.100)
    # 4 steps of 40 ms produced 10 tokens after the first: TPOT = 160 ms / (11 - 1)
    assert tpot_s(tr) == pytest.approx(0.016)
    assert out["tpot_s"]["mean"] == pytest.approx(0.016)
    assert out["e2e_s"]["p50"] == pytest.approx(0.265)
    assert out["output_tps_per_request"]["mean"] == pytest.approx(11 / 0.265)
    assert out["decode_tps_per_request"]["mean"] == pytest.approx(1 / 0.016)


def test_tpot_of_a_late_first_read_is_the_rate_after_it():
    """vLLM's TPOT is (last token - first token) / (n - 1) on the server. The client that read
    tokens 1-3 together (late) knows the rate only after that read: 40 ms a token, not the
    38.7 ms that (last read - first read) / (n - 1) would say."""
    tr = trace([1] * 62, step_ms=[0.0, 0.0] + [40.0] * 60, ttft_ms=180.0)
    assert tpot_s(tr) == pytest.approx(0.040)
    on_time = trace([1] * 62, step_ms=40.0, ttft_ms=100.0)
    assert tpot_s(on_time) == pytest.approx(0.040)


def test_per_step_and_per_token_latencies_differ_by_the_commit_length():
    commits = [5, 1, 3, 5, 2, 4]
    gaps = [50.0, 20.0, 40.0, 55.0, 30.0, 45.0]
    out = serving_metrics([trace(commits, step_ms=gaps)])["run"]
    step = out["inter_step_latency_s"]
    tok = out["inter_token_latency_s"]
    assert step["n"] == len(commits) and tok["n"] == sum(commits)
    assert step["mean"] == pytest.approx(np.mean(gaps) / 1e3)
    per_token = [g / c / 1e3 for g, c in zip(gaps, commits, strict=True) for _ in range(c)]
    assert tok["mean"] == pytest.approx(np.mean(per_token))
    assert tok["p90"] == pytest.approx(np.percentile(per_token, 90))
    rel = out["per_step_relation"]
    assert rel["mean_commit_len"] == pytest.approx(sum(commits) / len(commits))
    assert rel["mean_inter_step_latency_s"] == pytest.approx(
        rel["mean_inter_token_latency_s"] * rel["mean_commit_len"]
    )
    assert rel["mean_inter_step_latency_s"] == pytest.approx(step["mean"])
    assert rel["mean_inter_token_latency_s"] == pytest.approx(tok["mean"])
    # per-chunk gaps are per-step gaps here (one chunk per step), as evalscope would print
    assert out["inter_chunk_latency_s"]["mean"] == pytest.approx(step["mean"])


def test_distribution_has_every_percentile_mean_and_population_std():
    vals = [0.1 * i for i in range(1, 101)]
    d = distribution(vals)
    for q in PERCENTILES:
        assert d[f"p{q}"] == pytest.approx(np.percentile(vals, q))
    assert d["mean"] == pytest.approx(np.mean(vals)) and d["std"] == pytest.approx(np.std(vals))
    assert d["n"] == 100 and d["min"] == pytest.approx(0.1) and d["max"] == pytest.approx(10.0)
    empty = distribution([])
    assert empty["n"] == 0 and empty["p50"] is None and empty["mean"] is None


def test_throughput_over_the_wall_span_of_concurrent_requests():
    # two requests in flight together: 0..265 ms and 10..275 ms (11 tokens each)
    a = trace([3, 2, 4, 1], index=0, send_ms=0.0, tail_ms=5.0)
    b = trace([3, 2, 4, 1], index=1, send_ms=10.0, tail_ms=5.0)
    out = serving_metrics([a, b], run_concurrency=2)
    run = out["run"]
    assert run["duration_s"] == pytest.approx(0.275)
    assert run["request_throughput_rps"] == pytest.approx(2 / 0.275)
    assert run["output_tps"] == pytest.approx(22 / 0.275)
    assert [lvl["concurrency"] for lvl in out["by_concurrency"]] == [2]


def test_concurrency_levels_from_sweep_tags_and_main_from_full_generation():
    full = trace([2, 2, 2], index=0, tag="full_generation")
    c2 = [trace([2, 2], index=i, tag="concurrency_sweep:2", step_ms=60.0) for i in (1, 2)]
    c4 = [trace([2, 2], index=i, tag="concurrency_sweep:4", step_ms=90.0) for i in (3, 4, 5, 6)]
    out = serving_metrics([full, *c2, *c4])
    assert out["scope"] == "full_generation" and out["run"]["requests"] == 1
    levels = {lvl["concurrency"]: lvl for lvl in out["by_concurrency"]}
    assert sorted(levels) == [2, 4]
    assert levels[2]["requests"] == 2 and levels[4]["requests"] == 4
    assert levels[4]["inter_step_latency_s"]["mean"] == pytest.approx(0.090)


def test_goodput_counts_requests_meeting_every_slo_failed_ones_do_not():
    fast = trace([2, 2, 2], index=0, step_ms=20.0, ttft_ms=100.0)  # tpot 60/6 = 10 ms
    slow_ttft = trace([2, 2, 2], index=1, step_ms=20.0, ttft_ms=3000.0)
    stall = trace([2, 2, 2], index=2, step_ms=[20.0, 400.0, 20.0], ttft_ms=100.0)
    failed = trace([2], index=3, error=ErrorInfo(kind="http_status", message="503"))
    slo = parse_slo("ttft=2s,tpot=50ms")
    g = serving_metrics([fast, slow_ttft, stall, failed], slo=slo)["run"]["goodput"]
    # stall: tpot = 440/6 = 73 ms > 50 ms; failed never meets
    assert g["good_requests"] == 1 and g["requests"] == 4
    assert g["share"] == pytest.approx(0.25)
    assert g["met_by_metric"] == {"ttft": 2, "tpot": 2}
    assert g["good_rps"] > 0
    # a per-step SLO catches the stall alone: 400 ms step
    g2 = serving_metrics([fast, stall], slo=parse_slo("step=100ms"))["run"]["goodput"]
    assert g2["good_requests"] == 1
    # per token: the stall's 400 ms step committed 2 tokens -> 200 ms per token
    g3 = serving_metrics([fast, stall], slo=parse_slo("itl=150ms"))["run"]["goodput"]
    assert g3["good_requests"] == 1
    g4 = serving_metrics([fast, stall], slo=parse_slo("itl=250ms,e2e=1s"))["run"]["goodput"]
    assert g4["good_requests"] == 2


@pytest.mark.parametrize(
    "text,expected",
    [
        ("ttft=2s,tpot=50ms", {"ttft": 2.0, "tpot": 0.05}),
        (" step = 120ms , itl=30ms ", {"step": 0.12, "itl": 0.03}),
        ("e2e=1.5s,ttft=500us", {"e2e": 1.5, "ttft": 0.0005}),
    ],
)
def test_parse_slo(text, expected):
    got = parse_slo(text)
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        assert got[k] == pytest.approx(v)


@pytest.mark.parametrize(
    "text,needle",
    [
        ("", "NAME=VALUE"),
        ("ttft", "cannot read"),
        ("ttft=2", "needs a unit"),
        ("latency=2s", "unknown metric"),
        ("ttft=2s,ttft=3s", "twice"),
        ("tpot=0ms", "> 0"),
        ("tpot=50 minutes", "needs a unit"),
        ("tpot=-5ms", "cannot read"),
    ],
)
def test_parse_slo_rejects_bad_text_with_a_clear_message(text, needle):
    with pytest.raises(SloError, match=needle):
        parse_slo(text)


def test_intervals_bracket_the_statistic_and_need_two_requests():
    rng = np.random.default_rng(1)
    reqs = [
        trace([2, 3, 2], index=i, ttft_ms=float(v))
        for i, v in enumerate(rng.normal(200, 30, 40).clip(50))
    ]
    ttft = serving_metrics(reqs)["run"]["ttft_s"]
    lo, hi = ttft["mean_ci"]
    assert lo < ttft["mean"] < hi
    assert ttft["p50_ci"][0] <= ttft["p50"] <= ttft["p50_ci"][1]
    assert bootstrap_ci([[1.0]], np.mean) is None
    one = serving_metrics([reqs[0]])["run"]["ttft_s"]
    assert one["mean_ci"] is None
    # the pooled per-step mean resamples whole requests: its interval brackets the mean
    mixed = [
        trace([2, 2, 2, 2], index=i, step_ms=float(s))
        for i, s in enumerate([30, 35, 40, 45, 50, 55, 60, 65])
    ]
    st = serving_metrics(mixed)["run"]["inter_step_latency_s"]
    assert st["mean_ci"][0] < st["mean"] < st["mean_ci"][1]


def test_coalesced_chunks_give_no_per_step_latency_but_keep_chunk_gaps():
    # every chunk is 4 tokens and gaps are multiples of one period: a stream interval, not steps
    tr = trace([4] * 12, step_ms=[40.0, 80.0, 40.0, 120.0] * 3)
    out = serving_metrics([tr], max_commit_len=2)["run"]
    assert out["requests_with_timed_steps"] == 0
    assert out["inter_step_latency_s"]["n"] == 0 and out["per_step_relation"] is None
    assert out["inter_chunk_latency_s"]["n"] == 12
    assert out["tpot_s"]["n"] == 1  # TPOT does not depend on how tokens are chunked


def test_export_rows_have_the_documented_columns():
    reqs = [
        trace([3, 2], index=0),
        trace([1], index=1, error=ErrorInfo(kind="timeout_total", message="too slow")),
    ]
    run = Run(
        info=RunInfo(run_id="r", args={"slo": {"tpot": 0.05}}, started_perf_ns=0), requests=reqs
    )
    req_rows, step_rows = export_rows(run)
    assert [tuple(r) for r in req_rows] == [REQUEST_COLUMNS] * 2
    assert all(tuple(r) == STEP_COLUMNS for r in step_rows)
    assert req_rows[0]["ok"] is True and req_rows[0]["timed_steps"] == 2
    assert req_rows[0]["meets_slo"] is True
    assert req_rows[1]["error_kind"] == "timeout_total" and req_rows[1]["meets_slo"] is False
    assert [r["commit_len"] for r in step_rows] == [3, 2]
    assert step_rows[0]["inter_token_latency_s"] == pytest.approx(0.040 / 3)
    assert step_rows[1]["end_s"] == pytest.approx(0.180)


def test_server_lists_of_drafted_steps_only_still_leave_the_chunks_timed():
    """vLLM's per_step_accepted lists only the steps that drafted: 4 entries for 6 chunk steps.
    The server steps cannot be timed then; the chunk gaps are the per-step latencies."""
    from specscope.trace.model import ServerSpecFields

    commits = [3, 1, 4, 1, 2, 4]
    gaps = [40.0, 20.0, 45.0, 20.0, 35.0, 45.0]
    tr = trace(commits, step_ms=gaps)
    tr.server_spec = ServerSpecFields(per_step_accepted=[2, 3, 1, 3], source="vllm.metrics")
    out = serving_metrics([tr])["run"]
    assert out["requests_with_timed_steps"] == 1
    assert out["inter_step_latency_s"]["n"] == 6
    assert out["inter_step_latency_s"]["mean"] == pytest.approx(np.mean(gaps) / 1e3)
    assert out["per_step_relation"]["mean_commit_len"] == pytest.approx(np.mean(commits))


def test_chunks_the_server_says_merge_steps_are_not_timed():
    """Irregular chunks that look like steps, but the server counted twice as many verify
    steps (SGLang with a stream interval): no per-step latency, TPOT still there."""
    from specscope.trace.model import ServerSpecFields

    commits = [3, 5, 2, 6, 4, 3, 5, 6, 2, 4]
    tr = trace(commits, step_ms=[41.0, 77.0, 33.0, 95.0, 58.0, 44.0, 81.0, 90.0, 30.0, 62.0])
    tr.server_spec = ServerSpecFields(verify_ct=2 * len(commits), source="sglang.meta_info")
    out = serving_metrics([tr])["run"]
    assert out["requests_with_timed_steps"] == 0 and out["inter_step_latency_s"]["n"] == 0
    assert out["tpot_s"]["n"] == 1


def test_fewer_chunks_than_the_servers_listed_steps_are_not_timed():
    from specscope.trace.model import ServerSpecFields

    tr = trace([4, 4, 5, 3], step_ms=[80.0, 85.0, 90.0, 70.0])
    # 8 listed steps commit the stream's 16 decode tokens: 4 chunks merge them
    tr.server_spec = ServerSpecFields(
        per_step_accepted=[1, 1, 2, 1, 1, 2, 0, 0], source="vllm.metrics"
    )
    assert serving_metrics([tr])["run"]["requests_with_timed_steps"] == 0
