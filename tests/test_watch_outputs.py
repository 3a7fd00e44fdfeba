"""The watch's optional outputs and sources: `--serve-metrics` serves the documented names on
loopback; `--logs-cmd` reads a command's log lines through the parsers, is restarted when it
exits, and is killed as a group at the end."""

from __future__ import annotations

import asyncio
import math
import socket
import sys

import pytest

from specscope.watch.logcmd import LogCommand
from support.watch_exporter import example_events, scrape_after

LINE = (
    "[2026-11-29 10:00:01 TP0] Decode batch, #running-req: 1, #token: 2702, token usage: 0.02, "
    "accept len: 2.05, accept rate: 0.41, cuda graph: True, gen throughput (token/s): 32.70, "
    "#queue-req: 0"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_metrics_exposes_the_documented_names():
    text = scrape_after(example_events())
    for line in (
        "specscope_watch_decode_tps 290.9",
        "specscope_watch_commit_len 4.8",
        "specscope_watch_step_seconds 0.0165",
        "specscope_watch_speculation 1.0",
        'specscope_watch_cusum_statistic{factor="step_time"} 1.5',
        'specscope_watch_cusum_threshold{factor="commit_len"} 9.0',
        'specscope_watch_alerts_total{factor="step_time"} 1.0',
        'specscope_watch_errors_total{source="canary"} 1.0',
        "specscope_watch_windows_total 1.0",
        "specscope_watch_speedup 0.6",
        "specscope_watch_speedup_lower 0.55",
        "specscope_watch_speedup_upper 0.65",
        "specscope_watch_speculation_pays 0.0",
    ):
        assert line in text, line


def test_logs_cmd_reads_lines_restarts_and_is_killed():
    async def go() -> tuple[list, list, list, list]:
        code = f"import sys, time; print({LINE!r}, flush=True); time.sleep(0.5)"
        cmd = LogCommand([sys.executable, "-c", code])
        first = await cmd.read()  # starts it
        await asyncio.sleep(2.0)  # it printed and exited
        second = await cmd.read()
        third = await cmd.read()
        await cmd.close()
        return first[0], second[0], second[1], third[1]

    _, records, faults, after = asyncio.run(go())
    assert [r.commit_len for r in records] == [2.05]
    assert [k for k, _ in faults] == ["log_cmd_exited"]  # and started again
    assert after == []

    async def hangs() -> int | None:
        cmd = LogCommand([sys.executable, "-c", "import time; time.sleep(60)"])
        await cmd.read()
        proc = cmd._proc
        await cmd.close()
        assert proc is not None
        return proc.returncode

    assert asyncio.run(hangs()) is not None  # killed, not left running


def test_logs_cmd_that_cannot_run_is_a_fault():
    records, faults = asyncio.run(LogCommand(["/nonexistent/command"]).read())
    assert records == [] and [k for k, _ in faults] == ["log_cmd_failed"]


def test_diagnose_on_alert_runs_the_cli_without_a_shell_and_reads_its_cause(monkeypatch):
    import json

    from specscope.analysis.watch.events import Diagnosis
    from specscope.report.watch_events import event_json
    from specscope.watch import diagnosis
    from specscope.watch.child import ChildDone

    seen = {}

    async def fake_run(argv, stdin, timeout_s):
        seen["argv"], seen["stdin"], seen["timeout"] = argv, stdin, timeout_s
        out = {"verdict": ["Step time grew.", "Fix the KV layout."], "run_dir": "/r",
               "findings": [{"id": "step_time_drift", "cause": "kv_layout"}]}  # fmt: skip
        return ChildDone(0, json.dumps(out).encode(), b"")

    monkeypatch.setattr(diagnosis, "run_child", fake_run)
    done = asyncio.run(diagnosis.diagnose("http://127.0.0.1:1", None, 5.0))
    assert seen["argv"][1:] == ["-m", "specscope.cli", "diagnose", "http://127.0.0.1:1", "--quick", "--json"]  # fmt: skip
    assert seen["stdin"] is None and seen["timeout"] == 5.0
    assert (done.run_dir, done.exit_code, done.cause) == ("/r", 0, "kv_layout")
    assert done.message == "Step time grew. Fix the KV layout."
    line = event_json(Diagnosis(1.0, "step_time", done.run_dir, 0, done.cause, done.message))
    assert line["event"] == "diagnosis" and line["cause"] == "kv_layout"

    async def slow(argv, stdin, timeout_s):
        return ChildDone(None, b"", b"")

    monkeypatch.setattr(diagnosis, "run_child", slow)
    late = asyncio.run(diagnosis.diagnose("http://127.0.0.1:1", None, 5.0))
    assert late.exit_code is None and "still running after 5 s" in late.message


@pytest.mark.timeout(120)
def test_a_recorded_probe_is_a_baseline_and_a_bad_dir_one_line(tmp_path, twin_server):
    import os
    import subprocess
    from pathlib import Path

    from specscope.watch.baseline import BaselineError, baseline_from_run

    url = twin_server("healthy", time_scale=0.2).url
    src = Path(__file__).resolve().parents[1] / "src"
    done = subprocess.run(
        [sys.executable, "-m", "specscope.cli", "probe", url, "--prompt-tokens", "512",
         "--max-tokens", "256", "--repeat", "6", "--out", str(tmp_path / "run"), "--json"],
        capture_output=True, text=True, timeout=100, env={**os.environ, "PYTHONPATH": str(src)},
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-1000:]
    base = baseline_from_run(tmp_path / "run")
    assert base.source == str(tmp_path / "run") and base.step.n == 6
    assert 4.0 < math.exp(base.commit.mean) < 5.8 and base.speculating
    with pytest.raises(BaselineError, match="not a specscope run directory"):
        baseline_from_run(tmp_path)
