"""The watch's event stream and its faults (ARCHITECTURE §8, docs/watch.md): the keys of each
event, one line each; a bad URL or an unreachable server is one clear line with the contract's
exit code; Ctrl-C ends with a summary and exit 130 (SIGTERM: 143); the alert command runs
without a shell and within its timeout, and a cancelled one is killed at once; the log tail
survives rotation; a Prometheus restart is an error, not a delta. Loopback only."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specscope.analysis.watch.detector import Alert
from specscope.analysis.watch.events import WatchError, Window
from specscope.analysis.watch.window import EMPTY
from specscope.report.watch_events import event_line
from specscope.telemetry.prometheus import MetricsSnapshot
from specscope.watch import passive
from specscope.watch.alertcmd import run_alert_cmd
from specscope.watch.child import run_child
from specscope.watch.passive import LogTail, MetricsWatcher
from support.cli import start_cli
from support.diagnose import WAIT_S

SRC = Path(__file__).resolve().parents[1] / "src"
CTRL_C_EXIT_S = 30  # the most seconds from one SIGINT to the watch's exit
LOG_LINE = (
    "[2026-11-29 10:00:01 TP0] Decode batch, #running-req: 1, #token: 2702, token usage: 0.02, "
    "accept len: {acc}, accept rate: 0.41, cuda graph: True, gen throughput (token/s): 32.70, "
    "#queue-req: 0\n"
)


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-m", "specscope.cli", "watch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_alert_and_window_lines_carry_the_contract_keys():
    alert = Alert(
        "step_time", 1.5, (1.4, 1.6), 100.0, 110.0, "kv_layout", ("kv_layout",), "r", 2, 6.0, 4.5
    )
    line = event_line(alert)
    assert "\n" not in line
    obj = json.loads(line)
    assert list(obj)[:6] == ["event", "factor", "ratio", "ci", "since", "cause"]
    assert obj["event"] == "alert" and obj["ci"] == [1.4, 1.6] and obj["cause"] == "kv_layout"
    window = Window(1.0, 0.0, 1.0, "warmup", EMPTY, 0, "unknown", "why", None, {}, None)
    w = json.loads(event_line(window))
    for key in ("event", "t", "state", "decode_tps", "decode_tps_ci", "mean_commit_len",
                "mean_commit_len_ci", "mean_step_s", "mean_step_s_ci", "speculation"):  # fmt: skip
        assert key in w
    e = json.loads(event_line(WatchError(2.0, "canary", "connection", "refused\nagain")))
    assert e == {"event": "error", "t": 2.0, "source": "canary", "kind": "connection",
                 "message": "refused\nagain"}  # fmt: skip


@pytest.mark.parametrize("json_flag", [False, True])
def test_a_bad_url_is_one_line_and_exit_2(json_flag):
    done = _cli("not-a-url", *(["--json"] if json_flag else []))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("error: URL must look like http://HOST:PORT")
    if json_flag:
        assert json.loads(done.stdout) == {"error": lines[0][len("error: ") :], "exit_code": 2}


def test_an_unreachable_server_is_one_line_and_exit_1():
    done = _cli(f"http://127.0.0.1:{_free_port()}", "--duration", "5")
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: server not reachable: http://127.0.0.1:")
    assert "Traceback" not in done.stderr


def test_a_bad_option_is_one_line_and_exit_2():
    done = _cli("http://127.0.0.1:1", "--interval", "0")
    assert done.returncode == 2 and "--interval must be" in done.stderr


@pytest.mark.timeout(WAIT_S + 2 * CTRL_C_EXIT_S)
@pytest.mark.parametrize(("signum", "exit_code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_ends_with_a_summary(twin_server, tmp_path, signum, exit_code):
    url = twin_server("healthy", time_scale=0.5).url
    # start_cli: SIGINT at its default in the child. A suite run as a background job of a
    # non-interactive shell has SIGINT ignored, which survives exec: a watch started with a bare
    # Popen then never sees the Ctrl-C (#40: "no exit 90 s after one SIGINT", beside the suite)
    args = ["watch", url, "--probe-every", "0.5", "--interval", "1", "--json"]
    proc = start_cli(args, tmp_path)
    try:
        assert proc.stdout is not None
        seen = []
        deadline = time.monotonic() + WAIT_S  # niced beside busy loops, its start took >30 s
        while time.monotonic() < deadline:
            line = proc.stdout.readline()  # each event flushed as it happens
            seen.append(json.loads(line)["event"])
            if seen[-1] == "window":
                break
        assert seen[:1] == ["start"] and seen[-1] == "window"
        proc.send_signal(signum)
        try:  # 0.2 s idle (nearly all the interpreter's teardown), 7-18 s niced and starved
            out, _ = proc.communicate(timeout=CTRL_C_EXIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the watch did not end within {CTRL_C_EXIT_S} s of one {signum.name}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)  # no child left behind for a later test of this worker to find
    assert proc.returncode == exit_code
    last = json.loads(out.strip().splitlines()[-1])
    assert last["event"] == "summary" and last["interrupted"] is True


def test_the_alert_command_gets_the_json_without_a_shell(tmp_path):
    def run(argv, payload="{}", timeout=10):
        return asyncio.run(run_alert_cmd(argv, payload, timeout))

    sink = tmp_path / "got.json"
    code = f"import sys; open({str(sink)!r}, 'w').write(sys.stdin.read())"
    assert run([sys.executable, "-c", code], '{"event": "alert"}\n') is None
    assert json.loads(sink.read_text()) == {"event": "alert"}
    # a shell would expand this; without one it is one literal argument
    argv_code = f"import sys; open({str(sink)!r}, 'w').write(sys.argv[1])"
    assert run([sys.executable, "-c", argv_code, "$(echo hi) *"]) is None
    assert sink.read_text() == "$(echo hi) *"
    slow = run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert slow is not None and "still running after 0.5 s" in slow
    failed = run([sys.executable, "-c", "import sys; sys.exit('boom')"])
    assert failed is not None and "exit 1" in failed and "boom" in failed
    missing = run([str(tmp_path / "no-such-command")])
    assert missing is not None and "cannot run" in missing


@pytest.mark.parametrize("while_starting", [False, True], ids=["running", "starting"])
def test_a_cancelled_child_is_killed_at_once_with_its_children(
    tmp_path, monkeypatch, while_starting
):
    """Ctrl-C cancels the watch's tasks: a running alert command or diagnosis goes at once (in
    a thread it held the exit for up to its timeout), and so do the processes it started. Also
    when the cancel comes while asyncio is still setting the child up (`starting`: its setup
    made 1 s slower here): cancelled inside asyncio's own start, the child was killed alone and
    the exit waited for the pipes its child kept open, 60 s (seen under load)."""
    pids = tmp_path / "pids"
    code = (
        "import os, subprocess, sys, time\n"
        "kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{kid.pid}}')\n"
        "time.sleep(60)\n"
    )

    def started() -> bool:
        return pids.exists() and len(pids.read_text().split()) == 2

    in_setup: list[bool] = []  # set while the slowed setup waits, the child running
    if while_starting:
        real = asyncio.create_subprocess_exec

        async def slow_start(*args, **kwargs):
            proc = await real(*args, **kwargs)
            while not started():
                await asyncio.sleep(0.05)
            in_setup.append(True)
            await asyncio.sleep(1.0)  # the cancel lands here
            return proc

        monkeypatch.setattr(asyncio, "create_subprocess_exec", slow_start)

    async def cancel_soon() -> float:
        task = asyncio.create_task(run_child([sys.executable, "-c", code], None, 120))
        deadline = time.monotonic() + 60
        while not started() or (while_starting and not in_setup):
            assert time.monotonic() < deadline, "the child did not start"
            await asyncio.sleep(0.05)
        t0 = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - t0

    assert asyncio.run(cancel_soon()) < 5
    deadline = time.monotonic() + 10
    for pid in map(int, pids.read_text().split()):
        while _alive(pid):
            assert time.monotonic() < deadline, f"process {pid} outlived its cancelled parent"
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Running (a zombie of ours counts as gone: it is dead, only not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def test_the_log_tail_reads_new_lines_and_survives_rotation(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LOG_LINE.format(acc=9.99))  # history before the watch: not read
    tail = LogTail(log)
    assert tail.read() == ([], [])
    with log.open("a") as fh:
        fh.write(LOG_LINE.format(acc=2.05) + LOG_LINE.format(acc=2.10)[:40])  # a partial line
    records, faults = tail.read()
    assert [r.commit_len for r in records] == [2.05] and faults == []
    log.rename(tmp_path / "server.log.1")  # rotation: a new file under the old name
    records, faults = tail.read()
    assert records == [] and [k for k, _ in faults] == ["log_missing"]
    log.write_text(LOG_LINE.format(acc=3.0))
    records, faults = tail.read()
    assert [r.commit_len for r in records] == [3.0]
    assert [k for k, _ in faults] == ["log_rotated"]
    log.write_text("")  # truncated in place (copytruncate), seen before it grows again
    records, faults = tail.read()
    assert records == [] and [k for k, _ in faults] == ["log_rotated"]
    with log.open("a") as fh:
        fh.write(LOG_LINE.format(acc=1.5))
    records, faults = tail.read()
    assert [r.commit_len for r in records] == [1.5] and faults == []
    tail.close()


def test_a_counter_going_down_is_a_restart_not_a_delta(monkeypatch):
    import asyncio

    snaps = iter(
        [
            MetricsSnapshot(0.0, "vllm", {"drafts": 100.0, "accepted_tokens": 200.0}),
            MetricsSnapshot(10.0, "vllm", {"drafts": 150.0, "accepted_tokens": 300.0}),
            MetricsSnapshot(20.0, "vllm", {"drafts": 5.0, "accepted_tokens": 4.0}),
        ]
    )

    async def fetch(url: str, timeout_s: float) -> MetricsSnapshot:
        return next(snaps)

    monkeypatch.setattr(passive, "fetch_metrics", fetch)
    w = MetricsWatcher("http://127.0.0.1:1/metrics")
    assert asyncio.run(w.read()) == ([], [])
    records, faults = asyncio.run(w.read())
    assert [r.commit_len for r in records] == [3.0] and faults == []
    records, faults = asyncio.run(w.read())
    assert records == [] and [k for k, _ in faults] == ["server_restart"]
