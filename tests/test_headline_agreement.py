"""One run, one tokens/s: probe, report, compare and diagnose --json print the same decode tps
for the same run (to 0.1%), because they all get it from analysis.headline. Twin on loopback."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from specscope.analysis.summary import summarize
from specscope.cli import app
from specscope.trace import load_run

REL = 1e-3  # 0.1%


def _cli(*args: str) -> str:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.stdout


def _report_tps(run_dir, *extra: str) -> float:
    out = _cli("report", str(run_dir), "--markdown", str(run_dir / "check.md"), *extra)
    m = re.search(r"decode tokens/s\s+([0-9.]+)", out)
    assert m, out
    return float(m.group(1))


def _close(printed: float, exact: float) -> None:
    # the terminal report prints one decimal: allow its rounding on top of 0.1%
    assert abs(printed - exact) <= max(REL * exact, 0.05 + 1e-9), (printed, exact)


def _compare_tps(run_dir) -> tuple[float, float]:
    c = json.loads(_cli("compare", str(run_dir), str(run_dir), "--json"))
    # a run against itself: the split is exactly 1, inside its 95% intervals
    at = c["attribution"]
    assert at["tps_ratio"] == pytest.approx(1.0)
    for key in ("tps_ratio_ci", "acceptance_factor_ci", "step_time_factor_ci"):
        lo, hi = at[key]
        assert lo <= 1.0 <= hi, (key, at[key])
    return c["tps_a"], c["tps_b"]


def test_probe_report_compare_agree_on_a_probe_run(twin_server, fast_scenario, tmp_path):
    srv = twin_server(fast_scenario)
    run_dir = tmp_path / "probe"
    out = json.loads(
        _cli(
            "probe",
            srv.url,
            "--json",
            "--out",
            str(run_dir),
            "--repeat",
            "3",
            "--prompt-tokens",
            "16",
            "--max-tokens",
            "64",
        )
    )
    tps = out["summary"]["decode_tps"]
    assert tps and out["summary"]["decode_tps_ci"]
    lo, hi = out["summary"]["decode_tps_ci"]
    assert lo <= tps <= hi
    _close(_report_tps(run_dir), tps)
    a, b = _compare_tps(run_dir)
    assert a == pytest.approx(tps, rel=REL) and b == pytest.approx(tps, rel=REL)


def test_diagnose_report_compare_probe_summary_agree_on_a_diagnose_run(
    twin_server, fast_scenario, tmp_path
):
    srv = twin_server(fast_scenario)
    run_dir = tmp_path / "diag"
    obj = json.loads(
        _cli(
            "diagnose",
            srv.url,
            "--json",
            "--quick",
            "--out",
            str(run_dir),
            "--prompt-tokens",
            "48",
            "--max-tokens",
            "160",
            "--budget-s",
            "6",
        )
    )
    tps = obj["decode_tps"]
    # (the source may be the server's fields when a loaded machine merged chunks: either way
    # every command prints the same figure)
    assert tps and obj["decode_tps_ci"] and obj["mean_commit_len_source"] in ("client", "server")
    run = load_run(run_dir)
    # what probe's summary says of the same (main) requests
    main = run.by_tag("full_generation")
    assert main
    assert summarize(main)["decode_tps"] == pytest.approx(tps, rel=REL)
    _close(_report_tps(run_dir, "--reanalyze"), tps)
    _close(_report_tps(run_dir), tps)
    a, b = _compare_tps(run_dir)
    assert a == pytest.approx(tps, rel=REL) and b == pytest.approx(tps, rel=REL)
