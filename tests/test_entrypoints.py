"""The library entry points, called without the CLI: `diagnose_run` and `probe_run` against the
twin on loopback. What a caller gets back, what the hooks see, what is written (never the API
key), and the errors a caller must handle."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from specscope.entrypoints import (
    DiagnoseHooks,
    DiagnoseOptions,
    EmbeddedChoice,
    ProbeInputError,
    ProbeOptions,
    diagnose_run,
    probe_run,
)
from specscope.experiments.probe_target import ProbeInputs, TargetError
from specscope.probe.client import Timeouts
from specscope.probe.workloads import resolve_workload
from support.loopback import free_port

SECRET = "sk-entrypoint-secret-1234"


def test_diagnose_run_measures_explains_and_reports_through_its_hooks(tmp_path):
    """No URL: the embedded twin is started for the run; its log and /metrics are the evidence."""
    seen: dict[str, list] = {"server": [], "plan": [], "progress": []}

    @contextlib.contextmanager
    def progress():
        yield seen["progress"].append

    hooks = DiagnoseHooks(
        on_server=seen["server"].append,
        on_plan=lambda plan, url: seen["plan"].append((plan, url)),
        progress=progress,
    )
    options = DiagnoseOptions(
        out=tmp_path / "run",
        prompt_tokens=256,
        max_tokens=200,
        quick=True,
        probe=ProbeInputs(api_key=SECRET),
        embedded=EmbeddedChoice(scenario="healthy", time_scale=0.2),
    )
    done = diagnose_run(options, hooks)

    assert done.run_dir == tmp_path / "run" and not done.interrupted
    assert done.run.info.status == "complete", done.run.info.status_reason
    assert done.analysis.decode_tps and done.analysis.decode_tps > 0
    assert done.analysis.run_dir == str(done.run_dir)
    assert done.report_html.is_file() and (done.run_dir / "analysis.json").is_file()
    [server] = seen["server"]
    assert server.description == "twin scenario healthy, time scale 0.2"
    [(plan, url)] = seen["plan"]
    assert url == server.url and plan.steps
    assert seen["progress"] and seen["progress"][-1].requests_done >= 1
    args = done.run.info.args
    assert args["url"] == server.url and args["plan"]["steps"] and args["prompt_tokens"] == 256
    assert args["embedded"] == server.description
    assert args["logs"] == [str(tmp_path / "run" / "server.log")]
    assert args["metrics_url"] == server.url + "/metrics"
    # the embedded server's log and /metrics (scraped before and after) are read as evidence
    assert done.run.info.telemetry["log_records"] > 0
    assert any("run-scoped delta" in n for n in done.run.info.notes), done.run.info.notes
    for path in done.run_dir.iterdir():
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path.name


def test_diagnose_run_raises_target_error_when_nothing_answers(tmp_path):
    options = DiagnoseOptions(
        out=tmp_path / "run",
        url=f"http://127.0.0.1:{free_port()}",
        quick=True,
        probe=ProbeInputs(timeouts=Timeouts(connect=1.0, first_byte=2.0)),
    )
    with pytest.raises(TargetError, match="not reachable"):
        diagnose_run(options)
    assert not (tmp_path / "run").exists()  # nothing measured, nothing left behind


def test_probe_run_writes_each_request_and_the_summary(twin_server, tmp_path):
    srv = twin_server("healthy", time_scale=0.1)
    done: list = []

    @contextlib.contextmanager
    def progress(total):
        assert total == 3
        yield done.append

    options = ProbeOptions(
        url=srv.url,
        prompt_tokens=64,
        max_tokens=32,
        n_requests=3,
        concurrency=2,
        out=tmp_path / "run",
        api_key=SECRET,
        recorded={"url": srv.url},
    )
    outcome = asyncio.run(probe_run(options, progress))

    assert len(outcome.traces) == 3 and len(done) == 3
    assert all(t.error is None for t in outcome.traces)
    assert outcome.summary["requests"] == 3 and outcome.serving is not None
    assert outcome.info.args == {"url": srv.url}
    summary = json.loads((outcome.run_dir / "summary.json").read_text())
    assert summary["summary"]["ok"] == 3
    assert len((outcome.run_dir / "requests.jsonl").read_text().splitlines()) == 3
    assert SECRET not in (outcome.run_dir / "run.json").read_text()


def test_probe_run_records_an_unreachable_server_as_request_zero(tmp_path):
    options = ProbeOptions(
        url=f"http://127.0.0.1:{free_port()}",
        out=tmp_path / "run",
        timeouts=Timeouts(connect=1.0, first_byte=2.0),
    )
    outcome = asyncio.run(probe_run(options))
    [trace] = outcome.traces
    assert trace.index == 0 and trace.error is not None and trace.error.kind == "connection"
    assert outcome.info.status == "failed"


def test_probe_run_refuses_a_shape_beyond_the_servers_context(twin_server, tmp_path):
    srv = twin_server("healthy", time_scale=0.1)
    options = ProbeOptions(
        url=srv.url,
        prompt_tokens=1 << 19,
        max_tokens=1 << 19,
        out=tmp_path / "run",
        workload=resolve_workload(None),
    )
    with pytest.raises(ProbeInputError, match="exceeds the server's context"):
        asyncio.run(probe_run(options))
