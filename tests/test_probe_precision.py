"""`probe --precision P`: after its requests, more of them (new prompts, the same shape) until
decode tps' 95% interval is within +-P or the budget is spent, through the loop diagnose's
repeats use; the JSON, run.json and the terminal table say what was reached. In-process CLI
against a twin behind HTTP, bounded by the budget."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specscope.analysis.headline import precision as pr
from specscope.cli import app
from specscope.trace import load_run

runner = CliRunner()
SHAPE = ("--prompt-tokens", "16", "--max-tokens", "40")


def _probe(url: str, out, *extra: str):
    return runner.invoke(app, ["probe", url, "--out", str(out), *SHAPE, *extra])


def test_repeats_until_the_interval_is_narrow_enough(twin_server, fast_scenario, tmp_path):
    srv = twin_server(fast_scenario)
    res = _probe(
        srv.url,
        tmp_path / "run",
        "--json",
        "--repeat",
        "2",
        "--precision",
        "0.2",
        "--budget-s",
        "60",
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    p, s = out["precision"], out["summary"]
    assert p["target"] == 0.2 and p["stopped_by"] == pr.PRECISION, p
    assert p["requests"] >= 8 and p["over_requests"] and p["reached"] <= 0.2
    assert p["added_requests"] == s["requests"] - 2
    lo, hi = s["decode_tps_ci"]  # reached is the printed interval's relative half-width
    assert p["reached"] == pytest.approx((hi - lo) / 2 / s["decode_tps"])
    run = load_run(tmp_path / "run")
    assert run.info.status == "complete"
    assert run.info.precision["stopped_by"] == pr.PRECISION
    assert run.info.args["precision"] == 0.2 and run.info.args["budget_s"] == 60.0
    # every request recorded once, in order, each with its own prompt
    assert [t.index for t in run.requests] == list(range(s["requests"]))
    assert len({t.spec.prompt for t in run.requests}) == s["requests"]


def test_the_token_budget_stops_the_repeats_and_the_table_says_so(
    twin_server, fast_scenario, tmp_path
):
    srv = twin_server(fast_scenario)
    res = _probe(srv.url, tmp_path / "run", "--precision", "0.001", "--budget-tokens", "80")
    assert res.exit_code == 0, res.output
    assert "precision" in res.stdout and "decode tps known to ±" in res.stdout, res.stdout
    assert "over 3" in res.stdout  # the one request asked for and the two the budget allowed
    info = load_run(tmp_path / "run").info
    assert info.precision["stopped_by"] == pr.BUDGET
    assert info.precision["added_requests"] == 2  # 80 tokens at 40 a request


def test_without_precision_the_probe_sends_its_requests_only(twin_server, fast_scenario, tmp_path):
    srv = twin_server(fast_scenario)
    res = _probe(srv.url, tmp_path / "run", "--json", "--repeat", "2")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["precision"] is None and out["summary"]["requests"] == 2
    assert load_run(tmp_path / "run").info.precision == {}


@pytest.mark.parametrize(
    "flag,value", [("--precision", "1.5"), ("--budget-s", "inf"), ("--budget-tokens", "-5")]
)
def test_bad_values_are_one_line_and_exit_2(tmp_path, flag, value):
    res = runner.invoke(
        app, ["probe", "http://127.0.0.1:9", flag, value, "--out", str(tmp_path / "x")]
    )
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and flag in res.output
    assert not (tmp_path / "x").exists()
