"""Prometheus text of each engine -> run-scoped deltas (server-wide), gauges, restarts."""

from __future__ import annotations

import pytest

from specscope.telemetry import MetricsError, metrics_delta, parse_metrics_text

VLLM = """# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {p1}
"""
LLAMACPP = """# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total {draft_tokens}
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total {accepted}
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total {drafts}
"""
SGLANG = """# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"}} {length}
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"}} {rate}
"""


def test_vllm_counters_delta_with_per_position():
    before = parse_metrics_text(
        VLLM.format(drafts=100, draft_tokens=300, accepted=150, p0=80, p1=50), 10.0
    )
    after = parse_metrics_text(
        VLLM.format(drafts=300, draft_tokens=900, accepted=550, p0=260, p1=170), 20.0
    )
    (rec,) = metrics_delta(before, after)
    assert rec.format == "prometheus" and rec.scope == "run_delta"
    assert rec.n_steps == 200
    assert rec.commit_len == pytest.approx(1 + 400 / 200)  # AL = 1 + accepted / num_drafts
    assert rec.accept_rate == pytest.approx(400 / 600)
    assert rec.per_position == pytest.approx([180 / 200, 120 / 200])
    assert rec.fields["server_wide"] is True and rec.fields["window_s"] == 10.0
    assert "server-wide" in rec.fields["note"]


def test_llamacpp_counters_delta():
    before = parse_metrics_text(LLAMACPP.format(draft_tokens=1000, accepted=600, drafts=250))
    after = parse_metrics_text(LLAMACPP.format(draft_tokens=1400, accepted=900, drafts=350))
    (rec,) = metrics_delta(before, after)
    assert rec.fields["engine"] == "llamacpp"
    assert rec.commit_len == pytest.approx(1 + 300 / 100)
    assert rec.accept_rate == pytest.approx(300 / 400)


def test_restart_between_scrapes_gives_no_delta():
    before = parse_metrics_text(LLAMACPP.format(draft_tokens=1000, accepted=600, drafts=250))
    after = parse_metrics_text(LLAMACPP.format(draft_tokens=10, accepted=6, drafts=3))
    assert metrics_delta(before, after) == []


def test_sglang_gauges_are_an_interval_not_a_run():
    snap = parse_metrics_text(SGLANG.format(length=3.05, rate=0.68))
    (rec,) = metrics_delta(parse_metrics_text(""), snap)
    assert rec.scope == "interval" and rec.commit_len == 3.05 and rec.accept_rate == 0.68


def test_garbage_is_a_metrics_error():
    with pytest.raises(MetricsError):
        parse_metrics_text("vllm:spec_decode_num_drafts_total{engine=0 12\n")
