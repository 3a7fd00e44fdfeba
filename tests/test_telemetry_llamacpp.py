"""llama.cpp acceptance lines of builds that print `mean len` (not `mean acceptance length`),
and what llama.cpp's mean length counts: only steps that drafted something."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specscope.telemetry import parse_text
from specscope.telemetry.llamacpp import (
    ALL_STEPS,
    DRAFTED_STEPS,
    all_steps_commit_len,
    parse_llamacpp_timings,
)

FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def test_mean_len_lines_parse():
    result = parse_text((FIXTURES / "llamacpp_mean_len.log").read_text(encoding="utf-8"))
    assert result.summary.malformed == 0
    short, with_pos = result.records
    assert short.format == "llamacpp_log"
    assert short.commit_len == 8.47 and short.accepted_drafts == pytest.approx(7.47)
    assert short.accept_rate == 0.93333
    assert short.fields["accepted"] == 112 and short.fields["generated"] == 120
    assert short.request_id == "0" and short.fields["slot"] == 0
    # the figure averages drafted steps only, and says so; 112 / 7.47 = 15 drafted steps
    assert short.fields["commit_len_basis"] == DRAFTED_STEPS
    assert short.fields["drafted_steps"] == 15
    assert with_pos.commit_len == 1.6 and with_pos.per_position == [0.4, 0.1]
    assert with_pos.request_id == "7" and with_pos.fields["slot"] == 2


def test_all_steps_commit_len_counts_steps_that_drafted_nothing():
    # n-gram request: 101 tokens, 30 accepted over a few drafted steps. Steps = 100 - 30 = 70,
    # so a client sees 100 / 70 tokens per step whatever the per-drafted-step mean says.
    assert all_steps_commit_len(101, 1, 30) == pytest.approx(100 / 70)
    assert all_steps_commit_len(2 * 64, 2, 0) == 1.0  # no drafts: one token per step
    assert all_steps_commit_len(1, 1, 0) is None  # only the prefill token: no decode step
    assert all_steps_commit_len(10, 1, 9) is None  # more accepted than possible: inconsistent


def test_timings_record_carries_the_all_steps_commit_length():
    rec = parse_llamacpp_timings(
        {"id": 3, "timings": {"predicted_n": 129, "draft_n": 120, "draft_n_accepted": 112}}
    )
    assert rec is not None
    assert rec["n_steps"] == 128 - 112
    assert rec["commit_len"] == pytest.approx(128 / 16)
    assert rec["fields"]["commit_len_basis"] == ALL_STEPS
    # without predicted_n there is no step count: rate only
    bare = parse_llamacpp_timings({"draft_n": 10, "draft_n_accepted": 5})
    assert bare is not None and bare["commit_len"] is None and bare["accept_rate"] == 0.5


@given(st.integers(1, 50), st.integers(0, 5000), st.integers(0, 5000))
def test_all_steps_commit_len_is_a_commit_length_or_none(requests, decoded, accepted):
    v = all_steps_commit_len(requests + decoded, requests, accepted)
    if v is not None:
        assert v >= 1.0
        steps = decoded - accepted
        assert v * steps == pytest.approx(decoded)
