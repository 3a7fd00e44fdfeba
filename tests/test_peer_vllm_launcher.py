"""The vLLM peer's launcher (`python -m specscope.peers.vllm ... -- CMD`) and its one-line
failure when the peer is not installed.

Apart from tests/test_peer_vllm.py because nothing here is timed against vLLM's counts: under
xdist this module runs beside the timed lane (tests/conftest.py), not in it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import VLLM_CPU_BIND
from specscope.peers.vllm import VllmServer
from specscope.peers.vllm_install import VllmInstallError

pytestmark = [pytest.mark.peer, pytest.mark.slow, pytest.mark.timeout(900)]


def test_missing_install_fails_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(VllmInstallError, match="make peer-vllm"):
        VllmServer("ngram", root=tmp_path).start()
    done = subprocess.run(
        [sys.executable, "-m", "specscope.peers.vllm", "--root", str(tmp_path), "--", "true"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2 and "make peer-vllm" in done.stderr
    assert "Traceback" not in done.stderr


def test_launcher_serves_while_the_command_runs_then_stops_every_process(
    vllm_peer_root: Path, tmp_path: Path
) -> None:
    """`python -m specscope.peers.vllm ... -- CMD {url} {log}`: ready before CMD, CMD's exit code,
    the server and its EngineCore/worker children gone after (their process group is empty)."""
    note, log, run_dir = tmp_path / "seen.txt", tmp_path / "vllm.log", tmp_path / "probe"
    check = (
        "import os, sys, urllib.request;"
        "ok = urllib.request.urlopen(sys.argv[1] + '/v1/models', timeout=10).status == 200;"
        "open(sys.argv[3], 'w').write(sys.argv[1]);"
        "sys.exit(7 if ok and os.path.isfile(sys.argv[2]) else 3)"
    )
    started = time.monotonic()
    # The documented one-liner shape: a real specscope command, then the exit-status check.
    script = (
        f"{sys.executable} -m specscope.cli probe {{url}} --prompt-tokens 32 --max-tokens 16 "
        f"--json --out {run_dir} > {tmp_path / 'probe.json'} && "
        f'{sys.executable} -c "{check}" {{url}} {{log}} {note}'
    )
    done = subprocess.run(
        [sys.executable, "-m", "specscope.peers.vllm", "--spec", "none", "--prefix-caching", "off",
         "--enforce-eager", "--cpu-bind", VLLM_CPU_BIND, "--root", str(vllm_peer_root), "--log", str(log), "--",
         "bash", "-c", script],
        capture_output=True, text=True, timeout=420, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    ready = next((ln for ln in done.stderr.splitlines() if "ready at" in ln), "")
    print(f"\n[vllm launcher] whole run {time.monotonic() - started:.1f} s; {ready}")
    assert done.returncode == 7, done.stderr[-2000:]
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert probe["summary"]["ok"] == 1 and probe["flavor"] == "vllm"
    assert "'enable_prefix_caching': False" in log.read_text()  # vLLM's "non-default args"
    url = note.read_text().strip()
    assert url.startswith("http://127.0.0.1:")
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"{url}/v1/models", timeout=5)
    pgid = int(re.search(r"process group (\d+)", ready).group(1))  # type: ignore[union-attr]
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)  # the API server, its EngineCore and worker: all gone
