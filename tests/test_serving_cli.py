"""Serving metrics through the CLI: probe and diagnose JSON gain `serving`, `--slo` gives goodput
(bad text: exit 2), `report --csv` writes the documented columns, every renderer shows the
table, the HTML footer and the README carry the same glossary."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specscope.analysis.serving import PERCENTILES, REQUEST_COLUMNS, STEP_COLUMNS
from specscope.cli import app
from specscope.report import ReportContext, render_html, render_markdown
from specscope.report.serving import GLOSSARY, glossary_markdown
from specscope.store.analyses import load_analysis
from specscope.trace import load_run

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _probe(url: str, out: Path, *extra: str):
    return runner.invoke(
        app,
        [
            "probe",
            url,
            "--json",
            "--out",
            str(out),
            "--prompt-tokens",
            "16",
            "--max-tokens",
            "40",
            *extra,
        ],
    )


def test_probe_json_has_serving_and_goodput(twin_server, fast_scenario, tmp_path):
    srv = twin_server(fast_scenario)
    res = _probe(
        srv.url,
        tmp_path / "run",
        "--repeat",
        "2",
        "--concurrency",
        "2",
        "--slo",
        "ttft=30s,tpot=1s,step=5s",
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    s = out["serving"]
    run = s["run"]
    assert s["scope"] == "all requests" and run["requests"] == 4 and run["errors"] == 0
    for key in ("ttft_s", "tpot_s", "e2e_s", "inter_token_latency_s", "inter_step_latency_s"):
        assert all(f"p{q}" in run[key] for q in PERCENTILES) and run[key]["n"] > 0, key
        assert run[key]["mean_ci"][0] <= run[key]["mean"] <= run[key]["mean_ci"][1], key
    assert [lvl["concurrency"] for lvl in s["by_concurrency"]] == [2]
    rel = run["per_step_relation"]
    assert rel["mean_commit_len"] > 1  # the twin speculates: per step > per token
    assert rel["mean_inter_step_latency_s"] > rel["mean_inter_token_latency_s"]
    # the probe's token-weighted decode tps and the serving TPOT describe the same decode
    assert run["tpot_s"]["mean"] == pytest.approx(1 / out["summary"]["decode_tps"], rel=0.25)
    g = run["goodput"]
    assert g["slo_s"] == {"ttft": 30.0, "tpot": 1.0, "step": 5.0}
    # SLOs far above anything these requests take: every measured value meets its SLO, so a
    # request misses only where one of its values could not be measured (a client starved beside
    # a busy suite reads a whole request's events in one go: no step gap, no TPOT to time), and
    # the goodput names those. Idle, all four are measured and good.
    unmeasured = g["unmeasured_by_metric"]
    for k in ("ttft", "tpot", "step"):
        assert g["met_by_metric"][k] + unmeasured.get(k, 0) == 4, (k, g)
    most_missed = max(unmeasured.values(), default=0)
    assert 4 - sum(unmeasured.values()) <= g["good_requests"] <= 4 - most_missed, g
    assert g["good_requests"] >= 1 and g["share"] == g["good_requests"] / 4 and g["good_rps"] > 0
    # recorded with the run, so `report` reproduces the goodput
    assert load_run(tmp_path / "run").info.args["slo"] == {"ttft": 30.0, "tpot": 1.0, "step": 5.0}
    _, analysis = load_analysis(tmp_path / "run")
    assert analysis.serving["run"]["goodput"] == g
    strict = _probe(srv.url, tmp_path / "run2", "--slo", "tpot=1us")
    assert json.loads(strict.stdout)["serving"]["run"]["goodput"]["share"] == 0.0


@pytest.mark.parametrize(
    "bad", ["tpot=50", "tpot=50ms,latency=1s", "ttft:2s", "=", "ttft=2s,ttft=1s"]
)
def test_bad_slo_exits_2_with_one_line(bad, tmp_path):
    for cmd in (["probe", "http://127.0.0.1:9"], ["diagnose", "http://127.0.0.1:9"]):
        res = runner.invoke(app, [*cmd, "--slo", bad, "--out", str(tmp_path / "x")])
        assert res.exit_code == 2, res.output
        assert "--slo" in res.output and "Traceback" not in res.output
        assert not (tmp_path / "x").exists()


def test_diagnose_json_has_serving_per_concurrency_level(twin_server, fast_scenario, tmp_path):
    srv = twin_server(fast_scenario)
    res = runner.invoke(
        app,
        [
            "diagnose",
            srv.url,
            "--quick",
            "--json",
            "--out",
            str(tmp_path / "d"),
            "--prompt-tokens",
            "64",
            "--max-tokens",
            "48",
            "--concurrency",
            "1,2",
            "--slo",
            "ttft=30s,tpot=2s",
            "--budget-s",
            "6",
        ],
    )
    assert res.exit_code == 0, res.output[-3000:]
    out = json.loads(res.stdout)
    s = out["serving"]
    assert s["scope"] == "full_generation" and s["run"]["ok"] >= 1
    assert [lvl["concurrency"] for lvl in s["by_concurrency"]] == [1, 2]
    assert all(lvl["goodput"]["share"] == 1.0 for lvl in s["by_concurrency"])
    # the same object lands in analysis.json and in both written reports
    stored = json.loads((tmp_path / "d" / "analysis.json").read_text())
    assert stored["serving"]["run"]["requests"] == s["run"]["requests"]
    assert "Serving metrics" in (tmp_path / "d" / "report.md").read_text()
    html = (tmp_path / "d" / "report.html").read_text()
    assert "Serving metrics" in html and "Glossary" in html

    res = runner.invoke(app, ["report", str(tmp_path / "d"), "--csv", str(tmp_path / "csv")])
    assert res.exit_code == 0, res.output
    # folded, the serving table is named by its first header (one line less on the screen)
    assert "serving metric" in res.stdout and "By concurrency" in res.stdout
    with (tmp_path / "csv" / "requests.csv").open() as f:
        reqs = list(csv.DictReader(f))
    with (tmp_path / "csv" / "steps.csv").open() as f:
        steps = list(csv.DictReader(f))
    assert tuple(reqs[0]) == REQUEST_COLUMNS and tuple(steps[0]) == STEP_COLUMNS
    assert len(reqs) == out["requests"]
    timed = sum(int(r["timed_steps"]) for r in reqs)
    assert timed == len(steps) > 0
    assert {r["concurrency"] for r in reqs if r["tag"].startswith("concurrency_sweep")} == {
        "1",
        "2",
    }
    assert all(r["meets_slo"] == "True" for r in reqs if r["ok"] == "True")


def test_report_csv_on_an_unwritable_dir_exits_2(twin_server, fast_scenario, tmp_path):
    srv = twin_server(fast_scenario)
    assert _probe(srv.url, tmp_path / "run").exit_code == 0
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    res = runner.invoke(app, ["report", str(tmp_path / "run"), "--csv", str(blocker / "sub")])
    assert res.exit_code == 2 and "cannot write" in res.output


def test_readme_glossary_is_the_reports_glossary():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert glossary_markdown() in readme


def test_renderers_show_the_serving_table_and_escape_nothing_unsafe(tmp_path):
    from specscope.analysis.result import Analysis
    from specscope.analysis.serving import serving_metrics
    from specscope.trace.model import RunInfo
    from test_analysis_serving import trace

    serving = serving_metrics(
        [trace([3, 2, 4], index=i, ttft_ms=100 + 10 * i) for i in range(5)], slo={"tpot": 0.05}
    )
    ctx = ReportContext(analysis=Analysis(serving=serving), info=RunInfo(run_id="r<script>"))
    md = render_markdown(ctx)
    assert "## Serving metrics" in md and "TPOT (ms)".replace("(", "\\(").replace(")", "\\)") in md
    assert "goodput" in md
    html = render_html(ctx)
    assert "per step = per token x commit length" in html
    assert all(t.ours.strip("`") in html for t in GLOSSARY)
    assert "<script>" not in html.split("</head>", 1)[1].replace(
        '<script type="text/javascript">', ""
    )
