"""A stand-in peer server for the launcher's tests: a Python HTTP server that also spawns a
worker, as vLLM's API server spawns its EngineCore (so a stop must take a whole process group).
A module of its own because a child interpreter imports it too (the killed-starter test)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from specscope.peers.launcher import PeerServer, free_port

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


def worker_pid(log: Path) -> int:
    """The worker's pid, from the line the stand-in logs when it starts it."""
    line = next(ln for ln in log.read_text().splitlines() if ln.startswith("worker "))
    return int(line.split()[1])
