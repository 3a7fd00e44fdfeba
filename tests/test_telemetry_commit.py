"""One commit-length rule for server records (telemetry.commit): `specscope logs` and the
analysis agree, and a drafted-steps-only figure is never the mean commit length."""

from __future__ import annotations

import pytest

from specscope.analysis.fits.acceptance import from_telemetry
from specscope.telemetry.prefix import PrefixParser
from specscope.telemetry.records import to_record
from specscope.telemetry.summary import LogSummary
from specscope.telemetry.vllm import parse_vllm_spec

VLLM_LINE = (
    "INFO 12-01 10:00:00 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 3.50, "
    "Accepted throughput: 38.30 tokens/s, Drafted throughput: 61.19 tokens/s, Accepted: 383 "
    "tokens, Drafted: 612 tokens, Per-position acceptance rate: 0.791, 0.667, 0.582, 0.464, "
    "Avg Draft acceptance rate: 62.6%"
)


def test_vllm_log_line_is_per_drafted_step_in_logs_and_analysis():
    parsed = parse_vllm_spec(VLLM_LINE, PrefixParser())
    summary = LogSummary()
    summary.add(parsed)
    out = summary.to_json()
    assert out["mean_commit_len"] is None  # vLLM's figure leaves out steps that drafted nothing
    assert out["mean_commit_len_per_drafted_step"] == pytest.approx(3.5)
    sa = from_telemetry([to_record(parsed)])
    assert sa.per_drafted_step and sa.mean_commit_len == pytest.approx(3.5)


def test_all_steps_summaries_win_and_agree_between_logs_and_analysis():
    vllm = parse_vllm_spec(VLLM_LINE, PrefixParser())
    sglang = {
        "format": "sglang_decode",
        "commit_len": 2.5,
        "n_steps": 40,
        "scope": "interval",
        "fields": {},
    }
    sglang2 = {**sglang, "commit_len": 3.0, "n_steps": 60}
    summary = LogSummary()
    for p in (vllm, sglang, sglang2):
        summary.add(p)
    mean, basis = summary.mean_commit_len()
    assert basis == "weighted_interval" and mean == pytest.approx((2.5 * 40 + 3.0 * 60) / 100)
    sa = from_telemetry([to_record(p) for p in (vllm, sglang, sglang2)])
    assert not sa.per_drafted_step and sa.mean_commit_len == pytest.approx(mean)
