"""The JSON contract (ARCHITECTURE §8) as report/contract.py builds it from a real analysis: the
twin's seed-regression story replayed on a virtual clock (no server), diagnosed against a healthy
baseline, probed, and compared. Every key §8 names must be there; a missing one fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from specscope.analysis.serving import serving_metrics
from specscope.analysis.summary import summarize
from specscope.entrypoints import ProbeOutcome
from specscope.report.contract import (
    compare_json,
    diagnose_failure_json,
    diagnose_json,
    probe_json,
)
from specscope.store.analyses import analyze_run
from specscope.store.compare import compare_analyses
from support.reports import story_run

# §4.1's labels and intervals: probe `summary.*` and diagnose's top level
HEADLINE_DETAIL = (
    "mean_commit_len_source",
    "mean_commit_len_per_drafted_step",
    "drafted_step_share",
    "mean_step_s_source",
    "decode_tps_ci",
    "mean_commit_len_ci",
    "mean_step_s_ci",
    "ttft_s_ci",
    "interval_method",
    "headline_loops",
)
WORKLOAD = ("by_category", "repetition_loops", "prefix_cache", "delta_fields")
DIAGNOSE = (
    "verdict",
    "decode_tps",
    "ttft_s",
    "mean_commit_len",
    "mean_step_s",
    "findings",
    "attribution",
    "run_dir",
    "finding_tests",
    "telemetry",
    "serving",
    "breakeven",
    "precision",
    "speculation",
    "speculation_reason",
    *HEADLINE_DETAIL,
    *WORKLOAD,
)
FINDING = (
    "id",
    "summary",
    "confidence",
    "factor",
    "evidence",
    "next",
    "cause",
    "candidates",
    "ruled_out",
)
FINDING_TEST = (
    "id",
    "method",
    "effect",
    "ci",
    "p",
    "q",
    "min_effect",
    "unit",
    "reported",
    "outcome",
)
ATTRIBUTION = (
    "acceptance_factor",
    "step_time_factor",
    "tps_ratio_ci",
    "acceptance_factor_ci",
    "step_time_factor_ci",
)
PROBE_SUMMARY = (
    "requests",
    "errors",
    "ttft_s_p50",
    "decode_tps",
    "mean_commit_len",
    "mean_step_s",
    "speculation",
    "speculation_reason",
    *HEADLINE_DETAIL,
    *WORKLOAD,
)
COMPARE = (
    "verdict",
    "tps_ratio",
    "acceptance_factor",
    "step_time_factor",
    "findings",
    "what_changed",
    "finding_tests",
    "attribution",
    "breakeven",
    "speculation_a",
    "speculation_reason_a",
    "speculation_b",
    "speculation_reason_b",
)


def _missing(obj: dict, keys: tuple[str, ...]) -> list[str]:
    return [k for k in keys if k not in obj]


@pytest.fixture(scope="module")
def story() -> dict:
    base, obs = story_run("healthy", 1), story_run("seed-regression", 2)
    return {
        "base": base,
        "obs": obs,
        "a": analyze_run(base),
        "b": analyze_run(obs),
        "b_vs_a": analyze_run(obs, baseline=base),
    }


def test_a_missing_key_is_caught():
    """The check below fails on a dropped key (so the tests can fail)."""
    obj = diagnose_failure_json("x")
    del obj["mean_step_s"]
    assert _missing(obj, ("decode_tps", "mean_step_s")) == ["mean_step_s"]


def test_diagnose_json_has_the_contract_keys(story):
    obj = diagnose_json(story["b_vs_a"], story["obs"], Path("/tmp/report.html"))
    assert not _missing(obj, DIAGNOSE)
    assert obj["findings"], "the seed regression has findings"
    for f in obj["findings"]:
        assert not _missing(f, FINDING), f["id"]
    assert obj["finding_tests"]
    for t in obj["finding_tests"]:
        assert not _missing(t, FINDING_TEST), t.get("id")
    assert obj["attribution"] is not None and not _missing(obj["attribution"], ATTRIBUTION)
    # the verdict is read first: the first key, short sentences, the baseline's split in them
    assert next(iter(obj)) == "verdict" and all(isinstance(s, str) for s in obj["verdict"])
    assert any(s.startswith("Against the baseline: ") for s in obj["verdict"])


def test_diagnose_failure_json_keeps_the_contract_keys():
    obj = diagnose_failure_json("not reachable")
    keys = ("decode_tps", "ttft_s", "mean_commit_len", "mean_step_s", "findings", "attribution")
    assert not _missing(obj, (*keys, "run_dir", "speculation", "speculation_reason", "serving"))
    assert obj["error"] == "not reachable" and obj["findings"] == []
    assert obj["verdict"] == ["Nothing was measured: not reachable."]


def test_probe_json_has_the_contract_keys(story):
    traces = story["obs"].requests
    outcome = ProbeOutcome(
        run_dir=Path("/tmp/run"),
        info=story["obs"].info,
        traces=traces,
        summary=summarize(traces),
        detection="virtual",
        serving=serving_metrics(traces),
    )
    obj = probe_json(outcome, "http://127.0.0.1:9")
    assert not _missing(obj, ("summary", "serving", "precision", "run_dir"))
    assert not _missing(obj["summary"], PROBE_SUMMARY)


def test_compare_json_has_the_contract_keys(story):
    cmp = compare_analyses(story["a"], story["b"], story["b_vs_a"])
    obj = compare_json(cmp, Path("/tmp/a"), Path("/tmp/b"), 0.1, failed=True)
    assert not _missing(obj, COMPARE)
    assert obj["attribution"] is not None and not _missing(obj["attribution"], ATTRIBUTION)
    assert obj["verdict"] == story["b_vs_a"].verdict  # B against A, as diagnose --baseline
    assert (obj["run_a"], obj["run_b"], obj["fail_if_slower"], obj["failed"]) == (
        "/tmp/a",
        "/tmp/b",
        0.1,
        True,
    )
