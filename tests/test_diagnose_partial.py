"""Stopping early keeps what was measured: Ctrl-C (SIGINT to the real CLI) and a server that
dies mid-run both end in a partial run dir with its analysis and a report that says so."""

from __future__ import annotations

import json
import signal

from specscope.analysis.diagnosis.verdict import PARTIAL
from specscope.twin.scenario import load_scenario
from support.cli import start_cli
from support.diagnose import WAIT_S, cli, specscope, wait_for_requests


def test_ctrl_c_keeps_what_was_measured_and_reports_partial(twin_server, tmp_path):
    srv = twin_server("healthy", time_scale=1.0)
    run_dir = tmp_path / "run"
    proc = start_cli(
        [
            "diagnose",
            srv.url,
            "--out",
            str(run_dir),
            "--prompt-tokens",
            "512",
            "--max-tokens",
            "1500",
        ],
        tmp_path,
    )
    try:
        wait_for_requests(run_dir, 2, proc)  # calibration + the full generation
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "partial" and "Ctrl-C" in info["status_reason"]
    kept = (run_dir / "requests.jsonl").read_text().splitlines()
    assert len(kept) >= 2
    analysis = json.loads((run_dir / "analysis.json").read_text())
    assert analysis["partial"] is True and analysis["requests"] == len(kept)
    assert analysis["verdict"][0] == PARTIAL  # the verdict says it first, as the report does
    assert "Partial run." in (run_dir / "report.html").read_text()
    assert "PARTIAL RUN" in out
    assert out.index("PARTIAL RUN") < out.index("Decode runs at")


def test_server_dying_mid_run_reports_what_was_measured_plus_errors(twin_server, tmp_path):
    srv = twin_server("healthy", time_scale=1.0)
    run_dir = tmp_path / "run"
    proc = start_cli(
        [
            "diagnose",
            srv.url,
            "--json",
            "--out",
            str(run_dir),
            "--prompt-tokens",
            "512",
            "--max-tokens",
            "1500",
        ],
        tmp_path,
    )
    try:
        wait_for_requests(run_dir, 2, proc)
        srv.stop()
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err
    obj = json.loads(out)
    assert obj["partial"] is True and obj["errors"]
    assert obj["decode_tps"] is not None  # the full generation was measured before the stop
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "partial" and "server stopped answering" in info["status_reason"]
    html = (run_dir / "report.html").read_text()
    assert "Partial run." in html and "<h2>Errors</h2>" in html

    # `specscope report` re-renders the partial run, re-analysing without analysis.json
    (run_dir / "analysis.json").unlink()
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    rep = cli("report", str(run_dir), "--html", str(page), "--markdown", str(md), home=tmp_path)
    assert rep.exit_code == 0, rep.stderr
    assert "Partial run" in md.read_text() and "Partial run." in page.read_text()


def test_a_flaky_server_gets_its_errors_recorded_and_exit_1(twin_server, tmp_path):
    """5xx answers and cut streams (the twin's faults, seeded): every request is still
    recorded, the report lists the errors, the diagnosis covers the requests that worked."""
    sc = load_scenario("healthy")
    sc = sc.model_copy(
        update={
            "faults": sc.faults.model_copy(update={"error_5xx_prob": 0.25, "disconnect_prob": 0.15})
        }
    )
    srv = twin_server(sc, time_scale=1.0)
    out = tmp_path / "run"
    proc = specscope(
        "diagnose",
        srv.url,
        "--json",
        "--quick",
        "--out",
        str(out),
        "--prompt-tokens",
        "256",
        "--max-tokens",
        "300",
        "--budget-s",
        "6",
        home=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    obj = json.loads(proc.stdout)
    kinds = {e["kind"] for e in obj["errors"]}
    assert kinds & {"http_status", "stream_truncated"}, kinds
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert obj["requests"] == len(lines)
    assert "<h2>Errors</h2>" in (out / "report.html").read_text()
    assert json.loads((out / "run.json").read_text())["status"] == "complete"  # plan finished
