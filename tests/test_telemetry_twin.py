"""Against specscope's own server (the twin on 127.0.0.1, real HTTP): its log read back by
the log parsers, its /metrics scraped before and after, its /get_server_info, and records
aligned to the requests that caused them."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from specscope.telemetry import (
    LogQuery,
    MetricsError,
    align,
    fetch_server_info,
    metrics_delta,
    read_logs,
    scrape_metrics,
)
from specscope.telemetry.records import SpecRecord
from specscope.trace.model import RequestSpec, RequestTrace, RunInfo

MAX_TOKENS = 48


def _complete(url: str) -> tuple[str, int, int, int]:
    body = json.dumps(
        {"prompt": "hello", "max_tokens": MAX_TOKENS, "stream": False, "ignore_eos": True}
    ).encode()
    t0 = time.perf_counter_ns()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        out = json.loads(resp.read())
    return out["id"], out["usage"]["completion_tokens"], t0, time.perf_counter_ns()


def test_twin_log_metrics_and_alignment(twin_server, tmp_path):
    log = tmp_path / "server.log"
    srv = twin_server("healthy", time_scale=0.05, log_file=log, decode_log_interval=5)
    info = RunInfo(started_unix=time.time(), started_perf_ns=time.perf_counter_ns())
    before = scrape_metrics(srv.url + "/metrics")
    traces = []
    for i in range(2):
        rid, n_tokens, t0, t1 = _complete(srv.url)
        assert n_tokens == MAX_TOKENS
        traces.append(RequestTrace(index=i, request_id=rid, spec=RequestSpec(), t_send_ns=t0, t_end_ns=t1))
    after = scrape_metrics(srv.url + "/metrics")
    lifetime = fetch_server_info(srv.url)

    result = read_logs(LogQuery(paths=[str(log)], keep_records=True))
    steps = [r for r in result.records if r.scope == "step"]
    assert steps and result.summary.formats["sglang_decode"] >= 1
    mean_from_log, basis = result.summary.mean_commit_len()
    assert basis == "step"

    aligned = align(result.records, info, traces)
    assert aligned.matched_by_id == len(steps)  # every DDTREE line names its request
    for trace in traces:
        mine = [r for r in aligned.by_request[trace.index] if r.scope == "step"]
        assert mine and all(r.request_id == trace.request_id for r in mine)
        # Every committed token came from a verify step, except at most the prefill's first.
        assert sum(r.commit_len for r in mine) in (MAX_TOKENS, MAX_TOKENS - 1)
    assert not aligned.outside or all(r.ts is None or r.scope != "step" for r in aligned.outside)

    records = metrics_delta(before, after)
    delta = next(r for r in records if r.scope == "run_delta")
    assert delta.fields["server_wide"] is True
    assert delta.n_steps == len(steps)
    assert delta.commit_len == pytest.approx(mean_from_log, abs=1e-9)
    gauge = next(r for r in records if r.scope == "interval")
    assert gauge.commit_len is not None and "last decode-log interval" in gauge.fields["note"]

    assert [r.scope for r in lifetime] == ["lifetime"]
    assert lifetime[0].commit_len == pytest.approx(mean_from_log, abs=1e-9)  # fresh server


def test_scrape_errors_are_one_line(twin_server):
    srv = twin_server("healthy", time_scale=0.05)
    with pytest.raises(MetricsError, match="HTTP 404"):
        scrape_metrics(srv.url + "/no-such-endpoint")
    with pytest.raises(MetricsError, match="cannot scrape"):
        scrape_metrics("http://127.0.0.1:9/metrics", timeout_s=2)


def test_alignment_by_time_window():
    info = RunInfo(started_unix=1000.0, started_perf_ns=0)
    traces = [
        RequestTrace(index=0, spec=RequestSpec(), t_send_ns=0, t_end_ns=2_000_000_000),
        RequestTrace(index=1, spec=RequestSpec(), t_send_ns=10_000_000_000, t_end_ns=12_000_000_000),
        RequestTrace(index=2, spec=RequestSpec(), t_send_ns=11_000_000_000, t_end_ns=13_000_000_000),
    ]
    recs = [
        SpecRecord(format="sglang_decode", ts=1001.0),  # request 0 only
        SpecRecord(format="sglang_decode", ts=1011.5),  # requests 1 and 2 overlap: ambiguous
        SpecRecord(format="sglang_decode", ts=1100.0),  # after the run
        SpecRecord(format="ddtree", ts=None, request_id="nope"),  # undated, unknown id
    ]
    out = align(recs, info, traces, slack_s=0.5)
    assert out.by_request[0] == [recs[0]]
    assert out.ambiguous == [recs[1]]
    assert out.by_request[1] == [] and out.by_request[2] == []
    assert recs[2] in out.outside and recs[3] in out.outside
