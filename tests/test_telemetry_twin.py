"""Against specscope's own server (the twin on 127.0.0.1, real HTTP): its log read back by
the log parsers, its /metrics scraped before and after, its /get_server_info, and step records
grouped by the requests that caused them, as the analysis groups them."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.request

import pytest

from specscope.analysis.fits.acceptance import from_telemetry
from specscope.telemetry import (
    LogQuery,
    MetricsError,
    fetch_metrics,
    fetch_server_info,
    metrics_delta,
    read_logs,
    scrape_metrics,
)
from specscope.trace.model import RequestSpec, RequestTrace, RunInfo

MAX_TOKENS = 48


def _complete(url: str) -> tuple[str, int, int, int]:
    body = json.dumps(
        {"prompt": "hello", "max_tokens": MAX_TOKENS, "stream": False, "ignore_eos": True}
    ).encode()
    t0 = time.perf_counter_ns()
    req = urllib.request.Request(
        url + "/v1/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        out = json.loads(resp.read())
    return out["id"], out["usage"]["completion_tokens"], t0, time.perf_counter_ns()


def test_twin_log_metrics_and_records_per_request(twin_server, tmp_path):
    log = tmp_path / "server.log"
    srv = twin_server("healthy", time_scale=0.05, log_file=log, decode_log_interval=5)
    info = RunInfo(started_unix=time.time(), started_perf_ns=time.perf_counter_ns())
    before = scrape_metrics(srv.url + "/metrics")
    traces = []
    for i in range(2):
        rid, n_tokens, t0, t1 = _complete(srv.url)
        assert n_tokens == MAX_TOKENS
        traces.append(
            RequestTrace(index=i, request_id=rid, spec=RequestSpec(), t_send_ns=t0, t_end_ns=t1)
        )
    after = scrape_metrics(srv.url + "/metrics")
    lifetime = fetch_server_info(srv.url)

    result = read_logs(LogQuery(paths=[str(log)], keep_records=True))
    steps = [r for r in result.records if r.scope == "step"]
    assert steps and result.summary.formats["sglang_decode"] >= 1
    mean_from_log, basis = result.summary.mean_commit_len()
    assert basis == "step"

    ids = {t.request_id for t in traces}
    assert sum(1 for r in result.records if r.request_id in ids) == len(steps)  # every DDTREE
    server = from_telemetry(result.records)  # line names its request, and only those do
    assert server is not None and server.per_step
    for trace in traces:
        mine = [r for r in steps if r.request_id == trace.request_id]
        assert mine
        # Every committed token came from a verify step, except at most the prefill's first.
        assert sum(server.by_request[trace.request_id]) in (MAX_TOKENS, MAX_TOKENS - 1)
        assert sum(r.commit_len for r in mine) in (MAX_TOKENS, MAX_TOKENS - 1)
    # Every dated step record falls in the run's window (log stamps: whole seconds, 1 s slack).
    start = min(info.perf_ns_to_unix(t.t_send_ns) for t in traces) - 1.0
    end = max(info.perf_ns_to_unix(t.t_end_ns) for t in traces) + 1.0
    assert all(start <= r.ts <= end for r in steps if r.ts is not None)

    records = metrics_delta(before, after)
    delta = next(r for r in records if r.scope == "run_delta")
    assert delta.fields["server_wide"] is True
    assert delta.n_steps == len(steps)
    assert delta.commit_len == pytest.approx(mean_from_log, abs=1e-9)
    gauge = next(r for r in records if r.scope == "interval")
    assert gauge.commit_len is not None and "last decode-log interval" in gauge.fields["note"]

    assert [r.scope for r in lifetime] == ["lifetime"]
    assert lifetime[0].commit_len == pytest.approx(mean_from_log, abs=1e-9)  # fresh server


def _fetch(url: str, timeout_s: float = 5.0):
    return asyncio.run(fetch_metrics(url, timeout_s))


@pytest.mark.parametrize("scrape", [scrape_metrics, _fetch], ids=["thread", "event-loop"])
def test_scrape_errors_are_one_line(twin_server, scrape):
    srv = twin_server("healthy", time_scale=0.05)
    assert scrape(srv.url + "/metrics").counters == scrape_metrics(srv.url + "/metrics").counters
    with pytest.raises(MetricsError, match="HTTP 404"):
        scrape(srv.url + "/no-such-endpoint")
    with pytest.raises(MetricsError, match="cannot scrape"):
        scrape("http://127.0.0.1:9/metrics", timeout_s=2)
    with pytest.raises(MetricsError, match="cannot scrape"):
        scrape("not a url", timeout_s=2)


def test_a_scrape_of_a_hung_server_stops_when_cancelled():
    """The watch and the probe scrape on their event loop: cancelled (Ctrl-C), a scrape of a
    server that accepted and never answers ends at once. In a thread it ran on to its timeout,
    and `asyncio.run` waited for it at exit."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen()
        url = f"http://127.0.0.1:{hung.getsockname()[1]}/metrics"

        async def cancel_mid_scrape() -> None:
            task = asyncio.create_task(fetch_metrics(url, timeout_s=60))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        t0 = time.monotonic()
        asyncio.run(cancel_mid_scrape())
        assert time.monotonic() - t0 < 30  # the scrape's own timeout is 60 s
