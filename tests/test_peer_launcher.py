"""The one launcher both real peers use (peers/launcher.py), on a stand-in server: a Python HTTP
server that also spawns a worker, as vLLM's API server spawns its EngineCore. No models needed.
Processes are read from /proc (Linux): a killed server is a zombie until its new parent reaps
it, and a signal to a zombie still succeeds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from specscope.peers.launcher import PeerServerError, run_command
from support.standin import StandIn, worker_pid

# A parent that starts the stand-in and is then killed without stopping it (SIGKILL: no finally,
# no atexit), as a test run killed by its timeout or a user's `kill -9` would be.
PARENT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from support.standin import StandIn
    tmp = Path(sys.argv[1])
    srv = StandIn("serve", tmp, start_timeout_s=30, log_path=tmp / "server.log")
    srv.start()
    print(srv.process.pid, flush=True)
    time.sleep(600)
    """
)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a dead child waits for its parent, or init, to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in {"Z", "X"}


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] not in {"Z", "X"}:
            out.append(int(stat.parent.name))
    return out


def test_ready_on_entry_and_the_whole_process_group_gone_on_exit(tmp_path: Path) -> None:
    # children this worker had before (multiprocessing's resource tracker, started by an
    # earlier test's spawned engine process, lives as long as the worker): not the launcher's
    before = set(_children(os.getpid()))
    with StandIn("serve", tmp_path, start_timeout_s=30) as srv:
        with urllib.request.urlopen(f"{srv.url}/", timeout=5) as response:
            assert response.status == 200
        assert srv.startup_s is not None and srv.startup_s > 0
        leader = srv.process
        assert leader is not None
        worker, log = worker_pid(srv.log_path), srv.log_path
        os.kill(worker, 0)  # alive while serving
    assert leader.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(leader.pid, 0)  # the worker went with its leader
    assert not set(_children(os.getpid())) - before, "a clean stop leaves no watchdog behind"
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{srv.url}/", timeout=2)
    assert not log.exists()  # no log path given: a temporary folder, removed with the server


def test_a_server_that_dies_is_reported_with_its_exit_status_and_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "kept.log"
    srv = StandIn("die", tmp_path, start_timeout_s=30, log_path=log)
    with pytest.raises(PeerServerError) as err, srv:
        pass
    message = str(err.value)
    assert "exited with 3" in message and str(log) in message
    assert "fatal: cannot load the model" in message  # the reason, from the log's tail
    assert "\n" not in message
    assert srv.process is None and log.is_file()  # reaped; a given log is kept


def test_readiness_is_bounded_and_a_hung_server_is_stopped(tmp_path: Path) -> None:
    srv = StandIn("hang", tmp_path, start_timeout_s=2)
    with pytest.raises(PeerServerError, match=r"did not become ready \(within 2 s\)"):
        srv.__enter__()
    assert srv.process is None


def test_run_command_fills_url_and_log_and_returns_its_status(tmp_path: Path) -> None:
    with StandIn("serve", tmp_path, start_timeout_s=30) as srv:
        check = "import sys; sys.exit(5 if sys.argv[1].startswith('http://127.0.0.1:') and sys.argv[2].endswith('.log') else 1)"
        assert run_command(srv, [sys.executable, "-c", check, "{url}", "{log}"], timeout_s=30) == 5
        assert run_command(srv, ["no-such-command-xyz"], timeout_s=30) == 2
        sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
        assert run_command(srv, sleeper, timeout_s=0.5) == 1


def test_a_server_whose_starter_is_killed_goes_with_it(tmp_path: Path) -> None:
    """The starter SIGKILLed mid-serve (no stop, no exit handler): the watchdog sees its pipe
    close and takes the server's whole group down, worker included, instead of leaving a
    multi-GB peer running for good."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path), str(Path(__file__).parent)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert parent.stdout is not None
        leader = int(parent.stdout.readline())
        worker = worker_pid(tmp_path / "server.log")
        assert _running(leader) and _running(worker)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
    deadline = time.monotonic() + 20
    while (_running(leader) or _running(worker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in (leader, worker) if _running(pid)]
    for pid in left:  # not to leave them behind when the watchdog failed
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running after their starter died: {left}"
