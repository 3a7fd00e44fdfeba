"""Every example line quoted in shared/reference/observability.md parses to the right numbers
(fixtures copy them byte for byte), plus the format variants the reference describes."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from specscope.telemetry import Malformed, parse_line, parse_text
from specscope.telemetry.custom import PatternError
from specscope.telemetry.llamacpp import parse_llamacpp_timings
from specscope.telemetry.prefix import clean_line, parse_prefix
from specscope.telemetry.timewindow import TimeFormatError, parse_user_time

FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def _records(name: str):
    result = parse_text((FIXTURES / name).read_text(encoding="utf-8"))
    return result.summary, result.records


def _local(y, mo, d, h, mi, s):
    return datetime(y, mo, d, h, mi, s).timestamp()


def test_sglang_reference_lines():
    summary, recs = _records("sglang_decode_reference.log")
    assert summary.malformed == 0
    assert [r.format for r in recs] == ["sglang_decode", "sglang_decode"]
    old, new = recs
    # Old build: "Decode batch." with a trailing ", " after #queue-req.
    assert old.ts == _local(2025, 10, 22, 10, 27, 57)
    assert old.rank == "TP0"
    assert old.commit_len == 1.95 and old.accept_rate == 0.49
    assert old.scope == "interval"
    assert old.fields == {
        "running_req": 1,
        "token": 186,
        "token_usage": 0.0,
        "graph": "cuda",
        "graph_used": True,
        "gen_throughput": 178.86,
        "queue_req": 0,
    }
    # Newer build: "Decode batch," with an EP rank and an NPU graph label.
    assert new.ts == _local(2026, 7, 21, 15, 0, 13)
    assert new.rank == "TP0"
    assert new.commit_len == 3.05 and new.accept_rate == 0.68
    assert new.fields["running_req"] == 24 and new.fields["token"] == 233600
    assert new.fields["graph"] == "npu" and new.fields["queue_req"] == 2


def test_sglang_variants():
    summary, recs = _records("sglang_decode_variants.log")
    by_ts = {time.strftime("%H:%M:%S", time.localtime(r.ts)): r for r in recs if r.rank == "TP0"}
    no_rate = by_ts["08:00:00"]  # before Oct 2025: accept len only
    assert no_rate.commit_len == 2.10 and no_rate.accept_rate is None
    swa = by_ts["09:00:00"]
    assert swa.fields["iter"] == 1234
    assert swa.fields["full_token"] == 9000 and swa.fields["swa_token_usage"] == 0.05
    assert swa.fields["graph"] == "cpu" and swa.fields["graph_used"] is False
    mamba = by_ts["09:00:01"]
    assert mamba.fields["mamba_num"] == 8 and mamba.fields["mamba_usage"] == 0.20
    assert mamba.fields["graph"] == "musa" and mamba.commit_len == 3.25
    pd = by_ts["09:00:02"]
    assert pd.fields["transfer_req"] == 1 and pd.fields["fwd_occupancy"] == 87.5
    assert pd.fields["est_decode_tflops_s_per_gpu"] == 12.3
    no_spec = by_ts["09:00:03"]  # a server without speculation still logs decode batches
    assert no_spec.commit_len is None and no_spec.fields["gen_throughput"] == 30.0
    assert any(r.rank == "TP1" for r in recs)  # parse_text keeps every rank
    assert summary.malformed == 1  # "Decode batch: nothing parseable here"


def test_vllm_reference_lines():
    summary, recs = _records("vllm_reference.log")
    assert summary.malformed == 0
    new, old = recs
    assert new.format == "vllm_spec"
    assert new.commit_len == 2.37 and new.accept_rate == pytest.approx(0.091)
    assert new.per_position == [0.600, 0.385, 0.215, 0.108, 0.062, 0.000]
    assert new.fields["accepted_tokens"] == 89 and new.fields["drafted_tokens"] == 975
    assert new.fields["process"] == "APIServer" and new.fields["pid"] == 1
    assert new.n_steps == round(89 / 1.37)
    year = time.localtime().tm_year  # "05-01 14:24:50" has no year: the current one
    assert new.ts == _local(year, 5, 1, 14, 24, 50) or new.ts == _local(year - 1, 5, 1, 14, 24, 50)
    # Older order: draft acceptance first, per-position list last, throughputs elided.
    assert old.commit_len == 5.44 and old.accept_rate == pytest.approx(0.888)
    assert old.fields["accepted_tokens"] == 262 and old.fields["drafted_tokens"] == 295
    assert old.per_position == [0.983, 0.949]


def test_llamacpp_reference_lines():
    summary, recs = _records("llamacpp_reference.log")
    assert summary.malformed == 0
    old, timing, stats = recs
    assert old.accept_rate == 0.57576 and old.fields == {"accepted": 171, "generated": 297}
    assert old.commit_len is None  # the old line has no step count
    assert timing.commit_len == 2.92 and timing.accept_rate == 0.64479
    assert timing.per_position == [0.805, 0.632, 0.483]
    assert timing.request_id == "0" and timing.fields["slot"] == 1
    assert stats.n_steps == 87 and stats.commit_len == 2.92
    assert stats.fields["impl"] == "draft-eagle3" and stats.fields["acc_tokens"] == 167
    assert stats.accept_rate == pytest.approx(167 / 259)


def test_llamacpp_timings_object():
    # PR #12603's example fields; draft fields only appear when the request speculated.
    obj = {
        "timings": {
            "predicted_n": 200,
            "predicted_ms": 1000.0,
            "draft_n": 347,
            "draft_n_accepted": 65,
        }
    }
    parsed = parse_llamacpp_timings(obj)
    assert parsed is not None and parsed["accept_rate"] == pytest.approx(65 / 347)
    assert parse_llamacpp_timings({"timings": {"predicted_n": 200}}) is None
    rec = parse_line(
        'response {"id": "x", "timings": {"predicted_n": 200, "draft_n": 347, "draft_n_accepted": 65}}'
    )
    assert rec is not None and not isinstance(rec, Malformed)
    assert rec.format == "llamacpp_timings" and rec.fields["predicted_n"] == 200


def test_ddtree_and_lucebox_reference_lines():
    summary, recs = _records("ddtree_reference.log")
    assert summary.malformed == 0
    full, bare, luce = recs
    assert (full.request_id, full.step, full.accepted_drafts, full.commit_len) == (
        "abc",
        3,
        2.0,
        3.0,
    )
    assert full.scope == "step" and full.n_steps == 1 and full.rank == "TP0"
    assert full.ts == _local(2026, 11, 29, 10, 0, 0)
    assert (bare.rank, bare.ts, bare.commit_len) == ("TP0", None, 3.0)
    assert luce.format == "avg_commit" and luce.commit_len == 8.53
    assert luce.accept_rate == pytest.approx(213 / 256) and luce.n_steps == 30
    assert summary.commit_len_histogram() == {"3": 2}


def test_reference_templates_are_malformed_not_crashes():
    summary, recs = _records("templates_reference.log")
    assert recs == [] and summary.malformed == 2


def test_journal_prefix_and_control_characters():
    line = "Nov 29 10:00:00 host python[123]: \x1b[32m[TP0] DDTREE metrics avg_accepted_drafts=1.00 avg_commit_len=2.00\x1b[0m\r"
    rec = parse_line(line)
    assert rec is not None and not isinstance(rec, Malformed)
    assert rec.rank == "TP0" and rec.commit_len == 2.0
    year = time.localtime().tm_year
    assert rec.ts in (_local(year, 11, 29, 10, 0, 0), _local(year - 1, 11, 29, 10, 0, 0))
    assert clean_line("a\x1b[0mb\x00c\x7f") == "abc"


def test_prefix_year_inference_never_lands_far_in_the_future():
    now = _local(2027, 1, 2, 0, 0, 0)
    assert parse_prefix("Dec 31 23:59:00 h p[1]: ", now=now).ts == _local(2026, 12, 31, 23, 59, 0)
    assert parse_prefix("Jan 01 10:00:00 h p[1]: ", now=now).ts == _local(2027, 1, 1, 10, 0, 0)


def test_ddtree_one_field_is_enough_and_garbage_is_malformed():
    rec = parse_line("[2026-11-29 10:00:00 TP3] DFLASH metrics avg_commit_len=4.00")
    assert rec.accepted_drafts == 3.0 and rec.rank == "TP3" and rec.fields["engine"] == "DFLASH"
    bad = parse_line("[2026-11-29 10:00:00 TP0] DDTREE metrics avg_commit_len=abc")
    assert isinstance(bad, Malformed)
    assert parse_line("nothing to see here") is None


def test_custom_pattern():
    pat = r"\[(?P<rank>TP\d+)\] spec step rid=(?P<request_id>\w+) acc=(?P<accepted_drafts>\d+)"
    rec = parse_line("[TP0] spec step rid=r1 acc=3", format_="custom", pattern=pat)
    assert (rec.format, rec.rank, rec.request_id, rec.commit_len, rec.scope) == (
        "custom",
        "TP0",
        "r1",
        4.0,
        "step",
    )
    with pytest.raises(PatternError):
        parse_line("x", pattern="(unclosed")
    with pytest.raises(PatternError):
        parse_line("x", pattern=r"(?P<foo>\d+)")  # no usable group


def test_user_times():
    now = _local(2026, 11, 29, 12, 0, 0)
    assert parse_user_time("-60s", now) == now - 60
    assert parse_user_time("-5m", now) == now - 300
    assert parse_user_time("10:00:00", now) == _local(2026, 11, 29, 10, 0, 0)
    assert parse_user_time("2026-11-29T10:00:00", now) == _local(2026, 11, 29, 10, 0, 0)
    assert parse_user_time("2026-11-29 10:00", now) == _local(2026, 11, 29, 10, 0, 0)
    with pytest.raises(TimeFormatError):
        parse_user_time("yesterday-ish", now)
