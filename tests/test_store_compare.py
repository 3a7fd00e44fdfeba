"""`specscope compare`: the tps ratio splits into acceptance and step time; the regression gate
exits 1 only when B is slower than A by more than the threshold; a bad run dir exits 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specscope.cli import app
from test_store_index import _run_dir


@pytest.fixture
def runs(tmp_path):
    fast = _run_dir(tmp_path / "fast", 138.0, 5.0, 5.0 / 138.0, findings=("context_scaling",))
    slow = _run_dir(tmp_path / "slow", 32.7, 2.9, 2.9 / 32.7,
                    findings=("context_scaling", "acceptance_decay"))
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
    from specscope.analysis.model import Analysis, Finding
    from specscope.store.compare import compare_analyses

    a = Analysis(decode_tps=30.0, mean_commit_len=1.0, mean_step_s=1 / 30, requests=2,
                 findings=[Finding(id="speculation_overhead", summary="alone")])
    b = Analysis(decode_tps=20.0, mean_commit_len=1.4, mean_step_s=0.07, requests=2)
    b_vs_a = Analysis(decode_tps=20.0, requests=2, findings=[
        Finding(id="speculation_overhead", summary="slower than plain A", factor=1.5)])
    cmp = compare_analyses(a, b, b_vs_a)
    assert [f.id for f in cmp.findings] == ["speculation_overhead"]
    assert cmp.to_dict()["findings"][0]["summary"] == "slower than plain A"
