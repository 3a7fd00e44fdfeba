"""The twin as a server of its own: `specscope serve` in a child process, as a real server runs.

A twin in the test's own process shares its interpreter lock with whatever else runs there (the
client, a worker's leftover threads); beside three spinning threads its first chunk left 0.8 s
after its step ended (12.8 ms idle; measured by a script outside bench/, not kept), time a client
never sees but the twin's step-end truth counts. The single-stream tests that hold the probe's
timing to the twin's truth start it here instead and read the truth over HTTP (`GET
/twin/truth/ID`); the multi-worker ones (probe_workers, probe_ray) keep the in-process twin: eight
first requests at once on a fresh process were delivered late under the suite's load.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specscope.twin.scenario import Scenario
from support.cli import announced_url

START_TIMEOUT_S = 60.0


def scenario_toml(sc: Scenario) -> str:
    """The scenario as the TOML `specscope serve --scenario` reads: its scalars, then a table
    each (a scenario is one level deep; a JSON number, string, bool or list is TOML too)."""
    data = sc.model_dump(exclude={"baseline"})
    top = [f"{k} = {json.dumps(v)}" for k, v in data.items() if not isinstance(v, dict)]
    tables = [
        "\n".join([f"[{k}]", *(f"{kk} = {json.dumps(vv)}" for kk, vv in v.items())])
        for k, v in data.items()
        if isinstance(v, dict)
    ]
    return "\n".join(top) + "\n\n" + "\n\n".join(tables) + "\n"


def _warm(url: str) -> None:
    """One short streamed request before the test's, as SGLang sends one at launch: the first
    request of a fresh server pays its handler path's first use (11 ms idle, 83 ms a request
    under eight at once), time its steps do not hold and a client would see."""
    body = {"prompt": "The lighthouse keeper wrote in the log", "max_tokens": 8, "stream": True}
    req = urllib.request.Request(
        f"{url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


class TwinProcess:
    """A running `specscope serve` twin: its URL and its truth per request."""

    def __init__(self, url: str) -> None:
        self.url = url

    def truth(self, request_id: str) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.url}/twin/truth/{request_id}", timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise


@contextmanager
def twin_process(sc: Scenario, tmp: Path) -> Iterator[TwinProcess]:
    """`specscope serve` of `sc` on a free loopback port, stopped (SIGINT, then killed) after."""
    path = tmp / f"{sc.name}.toml"
    path.write_text(scenario_toml(sc), encoding="utf-8")
    args = ["serve", "--scenario", str(path), "--port", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "specscope.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = announced_url(proc, START_TIMEOUT_S)
        # its log goes on to stderr: read it, or a full pipe would stop the server mid-run
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # type: ignore[union-attr]
        _warm(url)
        yield TwinProcess(url)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
