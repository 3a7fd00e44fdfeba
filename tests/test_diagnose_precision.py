"""`diagnose --precision P`: the plan says what the repeats will do, the JSON, Markdown, HTML and
terminal reports say what they reached; bad values are one line and exit 2. The real CLI (a
subprocess) against the embedded twin, bounded by the plan, the budget and the timeout."""

from __future__ import annotations

import contextlib
import json
import signal
import time

import pytest

from specscope.analysis.headline import precision as pr
from support.cli import start_cli
from support.diagnose import WAIT_S, diagnose_json, specscope, wait_for_requests

ARGS = (
    "--backend",
    "twin",
    "--scenario",
    "healthy",
    "--time-scale",
    "0.3",
    "--quick",
    "--prompt-tokens",
    "256",
    "--max-tokens",
    "200",
)


def test_json_and_reports_say_what_the_repeats_reached(tmp_path):
    out = tmp_path / "run"
    obj, proc = diagnose_json(None, out, *ARGS, "--precision", "0.2", "--budget-s", "60")
    assert proc.returncode == 0, proc.stderr[-3000:]
    p = obj["precision"]
    assert set(p) >= {"target", "reached", "requests", "stopped_by"}
    assert p["target"] == 0.2 and p["stopped_by"] == pr.PRECISION, p
    assert p["requests"] >= 8 and p["over_requests"] and p["reached"] <= 0.2
    # reached is the printed interval's relative half-width
    lo, hi = obj["decode_tps_ci"]
    assert p["reached"] == pytest.approx((hi - lo) / 2 / obj["decode_tps"])
    assert "precision: then more full_generation requests (from 1)" in proc.stderr
    assert "±20.0%" in proc.stderr
    info = json.loads((out / "run.json").read_text())
    assert info["precision"]["stopped_by"] == pr.PRECISION
    assert info["args"]["plan"]["precision"]["target"] == 0.2
    assert info["args"]["plan"]["precision"]["budget_s"] == 60.0
    assert "Precision: decode tps known to ±" in (out / "report.md").read_text()
    assert "Precision: decode tps known to ±" in (out / "report.html").read_text()


def test_terminal_report_and_budget_stop(tmp_path):
    out = tmp_path / "run"
    proc = specscope(
        "diagnose",
        "--out",
        str(out),
        *ARGS,
        "--precision",
        "0.01",
        "--budget-tokens",
        "400",
        home=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "precision" in proc.stdout and "stopped by the budget" in proc.stdout, proc.stdout
    analysis = json.loads((out / "analysis.json").read_text())
    assert analysis["precision"]["stopped_by"] == pr.BUDGET
    assert analysis["precision"]["added_requests"] == 2  # 400 tokens at 200 a request


@pytest.mark.parametrize(
    "flag,value", [("--precision", "1.5"), ("--budget-s", "inf"), ("--budget-tokens", "-5")]
)
def test_bad_values_are_one_line_and_exit_2(tmp_path, flag, value):
    proc = specscope("diagnose", "http://127.0.0.1:9", flag, value, home=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and flag in proc.stderr


def test_ctrl_c_during_the_repeats_keeps_them_and_says_so(tmp_path):
    out = tmp_path / "run"
    proc = start_cli(
        ["diagnose", "--out", str(out), *ARGS, "--precision", "0.001", "--time-scale", "1.0"],
        tmp_path,
    )
    try:
        steps = _planned_steps(out, proc)
        plan_requests = 1 + sum(st["repeat"] * st["concurrency"] for st in steps)
        wait_for_requests(out, plan_requests + 2, proc)  # two repeats done: the loop runs
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    info = json.loads((out / "run.json").read_text())
    assert info["precision"]["stopped_by"] == pr.INTERRUPTED
    assert info["args"]["plan"]["precision"]["target"] == 0.001
    kept = (out / "requests.jsonl").read_text().splitlines()
    assert len(kept) >= plan_requests + 2
    analysis = json.loads((out / "analysis.json").read_text())
    assert analysis["precision"]["stopped_by"] == pr.INTERRUPTED
    assert analysis["requests"] == len(kept)


def _planned_steps(run_dir, proc) -> list[dict]:
    """The plan's steps from run.json, once the calibration request has let it be written."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return json.loads((run_dir / "run.json").read_text())["args"]["plan"]["steps"]
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    raise AssertionError(f"no plan in run.json within {WAIT_S} s")
