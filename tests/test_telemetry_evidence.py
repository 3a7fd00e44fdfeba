"""The scrape after a run waits (bounded) for vLLM's counters to count the run's requests."""

from __future__ import annotations

import time

import pytest

from specscope.telemetry import evidence, parse_metrics_text
from specscope.telemetry.evidence import EvidenceSources, collect_evidence

URL = "http://127.0.0.1:9/metrics"
VLLM = """# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {tokens}
# TYPE vllm:request_success counter
vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} {finished}
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_count{{engine="0",model_name="m"}} {steps}
vllm:inter_token_latency_seconds_sum{{engine="0",model_name="m"}} {seconds}
"""


def _vllm(finished: int) -> str:
    """vLLM's counters after `finished` requests of 64 tokens, 63 steps of 40 ms each."""
    return VLLM.format(
        tokens=64 * finished, finished=finished, steps=63 * finished, seconds=2.52 * finished
    )


class _LaggingServer:
    """A /metrics whose finished count reaches the run's only `lag_s` after the run ended
    (vLLM records a request's stats after its last token is sent), or never (`final`)."""

    def __init__(self, lag_s: float, final: int, early: int = 1) -> None:
        self.t0, self.lag_s, self.final, self.early, self.scrapes = None, lag_s, final, early, 0

    def __call__(self, url: str) -> object:
        self.scrapes += 1
        now = time.monotonic()
        self.t0 = self.t0 or now
        finished = self.final if now - self.t0 >= self.lag_s else self.early
        return parse_metrics_text(_vllm(finished), time.time(), url)


def _delta(found: evidence.ServerEvidence) -> dict[str, float]:
    (rec,) = found.records
    return rec.fields["delta"]


def test_the_scrape_after_waits_for_the_runs_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _LaggingServer(lag_s=0.3, final=2)
    monkeypatch.setattr(evidence, "scrape_metrics", server)
    before = parse_metrics_text(_vllm(0), time.time(), URL)
    found = collect_evidence(EvidenceSources(metrics_url=URL), time.time(), before, finished=2)
    assert _delta(found)["finished_requests"] == 2 and _delta(found)["itl_count"] == 126
    assert server.scrapes > 1
    (note,) = found.notes
    assert "counted 2 of the run's 2 finished requests after" in note
    assert "short" not in note


def test_counters_that_never_count_the_run_are_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evidence, "METRICS_SETTLE_S", 0.3)
    monkeypatch.setattr(evidence, "scrape_metrics", _LaggingServer(lag_s=1e9, final=2))
    before = parse_metrics_text(_vllm(0), time.time(), URL)
    t0 = time.monotonic()
    found = collect_evidence(EvidenceSources(metrics_url=URL), time.time(), before, finished=2)
    assert time.monotonic() - t0 < 5.0  # bounded by METRICS_SETTLE_S, not by the server
    assert _delta(found)["finished_requests"] == 1
    (note,) = found.notes
    assert "counted 1 of the run's 2 finished requests" in note and "short of the run" in note


@pytest.mark.parametrize("finished", [None, 0, 2])
def test_no_wait_when_counted_or_not_asked(
    monkeypatch: pytest.MonkeyPatch, finished: int | None
) -> None:
    """Counted at the first scrape, no count asked for, or an engine without a finished
    counter (llama.cpp): one scrape, and the note says nothing of waiting."""
    server = _LaggingServer(lag_s=0.0, final=2)
    monkeypatch.setattr(evidence, "scrape_metrics", server)
    before = parse_metrics_text(_vllm(0), time.time(), URL)
    found = collect_evidence(EvidenceSources(metrics_url=URL), time.time(), before, finished)
    assert server.scrapes == 1 and "finished requests" not in found.notes[0]


def test_an_engine_without_a_finished_counter_is_scraped_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = "# TYPE llamacpp:n_drafted_total counter\nllamacpp:n_drafted_total {n}\n"
    scrapes: list[str] = []

    def scrape(url: str) -> object:
        scrapes.append(url)
        return parse_metrics_text(text.format(n=40), time.time(), url)

    monkeypatch.setattr(evidence, "scrape_metrics", scrape)
    before = parse_metrics_text(text.format(n=10), time.time(), URL)
    found = collect_evidence(EvidenceSources(metrics_url=URL), time.time(), before, finished=3)
    assert scrapes == [URL] and _delta(found)["draft_tokens"] == 30


def test_a_restarted_server_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A finished count lower than before the run (the server restarted): no delta to wait
    for, one scrape."""
    server = _LaggingServer(lag_s=1e9, final=0, early=0)
    monkeypatch.setattr(evidence, "scrape_metrics", server)
    before = parse_metrics_text(_vllm(5), time.time(), URL)
    found = collect_evidence(EvidenceSources(metrics_url=URL), time.time(), before, finished=2)
    assert server.scrapes == 1 and "finished requests" not in found.notes[0]
