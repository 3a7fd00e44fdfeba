"""`specscope serve` as a user runs it: a real process on loopback, clear errors for bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from specscope.cli import app
from support.cli import announced_url

SPECSCOPE = [sys.executable, "-m", "specscope.cli"]


def _run(*args: str):
    """In-process (fast) for the error paths: they exit before serving anything."""
    res = CliRunner().invoke(app, ["serve", *args])
    res.returncode = res.exit_code
    return res


def test_serve_process_serves_the_twin_and_writes_truth(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    log = tmp_path / "server.log"
    proc = subprocess.Popen(
        [
            *SPECSCOPE,
            "serve",
            "--scenario",
            "healthy",
            "--port",
            "0",
            "--time-scale",
            "0.05",
            "--truth-file",
            str(truth),
            "--log-file",
            str(log),
            "--decode-log-interval",
            "3",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = announced_url(proc, 30)
        body = json.dumps({"prompt": "x y", "max_tokens": 30}).encode()
        req = urllib.request.Request(
            url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            out = json.loads(r.read())
        assert out["usage"]["completion_tokens"] == 30
        with urllib.request.urlopen(f"{url}/twin/truth/{out['id']}", timeout=10) as r:
            assert json.loads(r.read())["completion_tokens"] == 30
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        proc.stderr.close()
    line = json.loads(truth.read_text().splitlines()[0])
    assert line["request_id"] == out["id"] and len(line["steps"]) >= 1
    assert "Decode batch, #running-req: 1" in log.read_text()


def test_bad_scenario_is_a_one_line_usage_error(tmp_path: Path) -> None:
    res = _run("--scenario", "no-such-scenario")
    assert res.returncode == 2 and "no such scenario" in res.stderr
    assert res.exception is None or isinstance(res.exception, SystemExit)
    bad = tmp_path / "bad.toml"
    bad.write_text("[step]\ns0 = 'fast'\n")
    res = _run("--scenario", str(bad))
    assert res.returncode == 2 and "step.s0" in res.stderr and "Traceback" not in res.stderr


def test_bad_flags_are_usage_errors(tmp_path: Path) -> None:
    for args in (
        ["--backend", "nope"],
        ["--stream-interval", "0"],
        ["--time-scale", "-1"],
        ["--log-file", str(tmp_path / "missing" / "x.log")],
    ):
        res = _run(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert res.exception is None or isinstance(res.exception, SystemExit)


def test_port_in_use_is_a_usage_error() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        res = _run("--port", str(port))
    assert res.returncode == 2 and "cannot listen" in res.stderr
    assert res.exception is None or isinstance(res.exception, SystemExit)
