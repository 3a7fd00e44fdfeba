"""A diagnosis against a stored baseline run, and `compare` between the two: the verdict is a
tps ratio between two runs made one after the other, so it rests on both getting the same CPU.
Beside a busy suite (niced, next to a vLLM engine that busy-polls) one run can get a fraction of
a core and the other all of it: CI read the twin's 23% slowdown as none (q 0.059, then no finding
at all). So this module is in the timed lane (tests/conftest.py), which the rest yields to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.diagnose import check_contract, cli, diagnose_json, finding_ids, parse_page


@pytest.mark.slow
def test_speculation_overhead_against_a_plain_baseline_and_compare_gate(twin_server, tmp_path):
    base_srv = twin_server("speculation-overhead:baseline", time_scale=0.35)
    spec_srv = twin_server("speculation-overhead", time_scale=0.35)
    # The verdict rests on the full generations' tps (the precision repeats): a token budget, not
    # seconds, so that a loaded machine does not leave fewer of them.
    shape = (
        "--quick",
        "--prompt-tokens",
        "384",
        "--max-tokens",
        "300",
        "--workload",
        "long-writing",
        "--budget-tokens",
        "900",
    )
    base, proc_a = diagnose_json(base_srv.url, tmp_path / "plain", *shape)
    assert proc_a.returncode == 0, proc_a.stderr[-3000:]
    # no drafter on the plain server: nothing to blame on acceptance, and it says so
    assert not {"acceptance_low", "speculation_overhead"} & set(finding_ids(base)), finding_ids(
        base
    )
    stored = json.loads((Path(base["run_dir"]) / "analysis.json").read_text())
    assert any("speculation is off" in n for n in stored["notes"]), stored["notes"]
    obj, proc_b = diagnose_json(
        spec_srv.url, tmp_path / "spec", *shape, "--baseline", base["run_dir"]
    )
    assert proc_b.returncode == 0, proc_b.stderr[-3000:]
    check_contract(obj)
    assert "speculation_overhead" in finding_ids(obj)
    at = obj["attribution"]
    assert at is not None and at["acceptance_factor"] and at["step_time_factor"]
    # the plain baseline commits 1 token/step: speculation wins on acceptance, loses on step time
    assert at["acceptance_factor"] < 1.0 < at["step_time_factor"]
    assert "plot-baseline_vs_observed" in parse_page(Path(obj["run_dir"]) / "report.html").ids

    cmp = cli("compare", base["run_dir"], obj["run_dir"], "--json", home=tmp_path)
    assert cmp.exit_code == 0, cmp.stderr
    c = json.loads(cmp.stdout)
    for key in ("tps_ratio", "acceptance_factor", "step_time_factor", "findings"):
        assert key in c
    assert c["tps_ratio"] > 1.0  # the speculative run is slower
    assert "speculation_overhead" in {f["id"] for f in c["findings"]}, c["findings"]
    assert c["acceptance_factor"] * c["step_time_factor"] == pytest.approx(c["tps_ratio"], rel=1e-6)
    gate = cli("compare", base["run_dir"], obj["run_dir"], "--fail-if-slower", "10%", home=tmp_path)
    assert gate.exit_code == 1, gate.stdout + gate.stderr
    assert (
        cli(
            "compare", obj["run_dir"], base["run_dir"], "--fail-if-slower", "10%", home=tmp_path
        ).exit_code
        == 0
    )
    assert cli("compare", base["run_dir"], str(tmp_path / "nope"), home=tmp_path).exit_code == 2
