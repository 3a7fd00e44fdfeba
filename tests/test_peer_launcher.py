"""The one launcher both real peers use (peers/launcher.py), on a stand-in server: a Python HTTP
server that also spawns a worker, as vLLM's API server spawns its EngineCore. No models needed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from specscope.peers.launcher import PeerServer, PeerServerError, free_port, run_command

SERVER = textwrap.dedent(
    """
    import http.server, subprocess, sys
    port, mode = int(sys.argv[1]), sys.argv[2]
    print("starting stand-in", flush=True)
    if mode == "die":
        print("fatal: cannot load the model", file=sys.stderr, flush=True)
        sys.exit(3)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"worker {worker.pid}", flush=True)
    if mode == "hang":
        worker.wait()
    http.server.HTTPServer(("127.0.0.1", port), http.server.SimpleHTTPRequestHandler).serve_forever()
    """
)


class StandIn(PeerServer):
    name = "stand-in"
    ready_path = "/"

    def __init__(self, mode: str, tmp: Path, **kw) -> None:
        super().__init__(label=mode, log_path=kw.pop("log_path", None), **kw)
        self.mode, self.tmp, self.port = mode, tmp, free_port()

    def _spawn(self, log) -> subprocess.Popen[str]:
        script = self.tmp / "server.py"
        script.write_text(SERVER)
        argv = [sys.executable, str(script), str(self.port), self.mode]
        return self._popen(argv, log)

    def _discover_url(self, deadline: float) -> str:
        return f"http://127.0.0.1:{self.port}"


def _worker_pid(log: Path) -> int:
    line = next(ln for ln in log.read_text().splitlines() if ln.startswith("worker "))
    return int(line.split()[1])


def test_ready_on_entry_and_the_whole_process_group_gone_on_exit(tmp_path: Path) -> None:
    with StandIn("serve", tmp_path, start_timeout_s=30) as srv:
        with urllib.request.urlopen(f"{srv.url}/", timeout=5) as response:
            assert response.status == 200
        assert srv.startup_s is not None and srv.startup_s > 0
        leader = srv.process
        assert leader is not None
        worker, log = _worker_pid(srv.log_path), srv.log_path
        os.kill(worker, 0)  # alive while serving
    assert leader.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(leader.pid, 0)  # the worker went with its leader
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
