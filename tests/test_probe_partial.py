"""`specscope probe` stopped by Ctrl-C (SIGINT to the real CLI) prints what it measured and the
run directory, as diagnose does: the requests in flight are kept as cancelled and, with none
finished, their streamed steps are the reading; exit 130, no traceback."""

from __future__ import annotations

import json
import signal
import time
import urllib.request

from specscope.trace import load_run
from support.cli import start_cli
from support.diagnose import WAIT_S


def _streaming(url: str) -> bool:
    """The twin has requests running (its /metrics gauge)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    running = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("sglang:num_running_reqs{")
    ]
    return bool(running) and running[0] > 0


def test_ctrl_c_prints_what_was_measured_and_the_run_dir(twin_server, tmp_path):
    srv = twin_server("healthy", time_scale=1.0)
    run_dir = tmp_path / "run"
    args = ["probe", srv.url, "--prompt-tokens", "128", "--max-tokens", "1500"]
    proc = start_cli([*args, "--concurrency", "2", "--out", str(run_dir)], tmp_path)
    try:
        deadline = time.monotonic() + WAIT_S
        while not _streaming(srv.url):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        time.sleep(2.0)  # some hundred tokens streamed, no request near its 1,500
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "interrupted: keeping what was measured" in err
    assert out.index("PARTIAL RUN") < out.index("run directory")
    run = load_run(run_dir)
    assert run.info.status == "partial"
    assert [r.error.kind for r in run.requests if r.error] == ["cancelled", "cancelled"]
    summary = json.loads((run_dir / "summary.json").read_text())["summary"]
    assert summary["ok"] == 0 and summary["decode_tps"] is not None
    assert any("cut short by Ctrl-C" in n for n in summary["headline_notes"])
