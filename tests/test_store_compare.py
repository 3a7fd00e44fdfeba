"""`specscope compare`: the tps ratio splits into acceptance and step time; the regression gate
exits 1 only when B is slower than A by more than the threshold; a bad run dir exits 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specscope.analysis.diagnosis.diagnose import analyze
from specscope.analysis.result import Finding
from specscope.cli import app
from specscope.store.compare import compare_runs, differing_findings
from test_analysis_diagnosis import _vrun, scenarios  # noqa: F401 (a fixture)
from test_analysis_speculation import ACCEPTANCE_IDS, _ids, _run, overhead, plain  # noqa: F401
from test_store_index import _run_dir


@pytest.fixture
def runs(tmp_path):
    fast = _run_dir(tmp_path / "fast", 138.0, 5.0, 5.0 / 138.0, findings=("context_scaling",))
    slow = _run_dir(
        tmp_path / "slow", 32.7, 2.9, 2.9 / 32.7, findings=("context_scaling", "acceptance_decay")
    )
    return fast, slow


def _compare(*args):
    return CliRunner().invoke(app, ["compare", *map(str, args)])


def test_json_keys_and_exact_split(runs):
    fast, slow = runs
    res = _compare(fast, slow, "--json")
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    for key in ("tps_ratio", "acceptance_factor", "step_time_factor", "findings"):
        assert key in obj
    assert obj["tps_ratio"] == pytest.approx(138.0 / 32.7)
    assert obj["acceptance_factor"] * obj["step_time_factor"] == pytest.approx(obj["tps_ratio"])
    assert obj["new_findings"] == ["acceptance_decay"]
    assert [f["id"] for f in obj["findings"]] == ["acceptance_decay"]


def test_regression_gate_exit_codes(runs):
    fast, slow = runs
    assert _compare(fast, slow, "--fail-if-slower", "10%").exit_code == 1
    assert _compare(slow, fast, "--fail-if-slower", "10%").exit_code == 0
    assert _compare(fast, fast, "--fail-if-slower", "10%").exit_code == 0
    # 76% slower passes a 80% gate
    assert _compare(fast, slow, "--fail-if-slower", "80%").exit_code == 0


def test_bad_input_exits_2(runs, tmp_path):
    fast, _ = runs
    assert _compare(fast, tmp_path / "missing").exit_code == 2
    assert _compare(fast, fast, "--fail-if-slower", "lots").exit_code == 2
    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    res = _compare(not_a_run, fast)
    assert res.exit_code == 2 and "not a specscope run directory" in res.output


def test_comparative_finding_of_b_stays_in_findings_when_a_has_the_id():
    """A (analysed alone) may carry speculation_overhead from a low commit length; B measured
    against A as baseline says B is slower because of speculation: that is the comparison's
    conclusion and belongs in `findings`, not only in `b_findings`."""
    from specscope.analysis.result import Analysis, Finding
    from specscope.report.contract import comparison_json
    from specscope.store.compare import compare_analyses

    a = Analysis(
        decode_tps=30.0,
        mean_commit_len=1.0,
        mean_step_s=1 / 30,
        requests=2,
        findings=[Finding(id="speculation_overhead", summary="alone")],
    )
    b = Analysis(decode_tps=20.0, mean_commit_len=1.4, mean_step_s=0.07, requests=2)
    b_vs_a = Analysis(
        decode_tps=20.0,
        requests=2,
        findings=[Finding(id="speculation_overhead", summary="slower than plain A", factor=1.5)],
    )
    cmp = compare_analyses(a, b, b_vs_a)
    assert [f.id for f in cmp.findings] == ["speculation_overhead"]
    assert comparison_json(cmp)["findings"][0]["summary"] == "slower than plain A"


# -- compare_runs: the comparison `specscope compare` builds, from two runs' traces --------


def test_compare_runs_splits_exactly_and_lists_new_findings(scenarios):  # noqa: F811 (fixture)
    a = _vrun(scenarios["healthy"], 20).run
    b = _vrun(scenarios["seed-regression"], 21).run
    c = compare_runs(a, b)
    assert c.acceptance_factor * c.step_time_factor == pytest.approx(c.tps_ratio, rel=1e-9)
    assert c.tps_ratio > 2.5
    new = {f.id for f in c.findings}
    assert {"acceptance_decay", "step_time_drift"} <= new
    assert "context_scaling" not in new  # both runs have it: not a difference
    back = compare_runs(b, a)
    assert back.tps_ratio == pytest.approx(1 / c.tps_ratio, rel=1e-9)
    assert {"acceptance_decay", "step_time_drift"} <= set(back.resolved_findings)


def test_speculative_run_against_the_plain_baseline_keeps_speculation_overhead(overhead, plain):  # noqa: F811 (fixtures)
    base, spec = _run(plain, 4), _run(overhead, 5)
    an = analyze(spec, baseline=base)
    assert "speculation_overhead" in _ids(an)
    c = compare_runs(base, spec)
    assert c.tps_ratio > 1.0  # B (speculative) is slower
    assert "speculation_overhead" in {f.id for f in c.findings}
    # the plain run measured against the speculative one is not "speculation overhead"
    back = compare_runs(spec, base)
    assert not {f.id for f in back.findings} & ACCEPTANCE_IDS


def test_comparative_findings_survive_when_a_has_the_same_id():
    a = [
        Finding(id="speculation_overhead", summary="low commit, no baseline"),
        Finding(id="context_scaling", summary="a", factor=None),
    ]
    b = [
        Finding(id="speculation_overhead", summary="slower than A", factor=1.4),
        Finding(id="context_scaling", summary="b", factor=1.1),
        Finding(id="acceptance_decay", summary="new", factor=1.2),
    ]
    got = [f.id for f in differing_findings(a, b)]
    assert got == ["speculation_overhead", "acceptance_decay"]
    # without a factor (not measured against A) a shared id is old news
    b[0] = Finding(id="speculation_overhead", summary="same as A")
    assert [f.id for f in differing_findings(a, b)] == ["acceptance_decay"]
