"""The real CLI in a child process, as a terminal would start it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _sigint_default() -> None:
    """In the child before exec: SIGINT back to its default, so Python installs its
    KeyboardInterrupt handler. A suite started as a background job of a non-interactive shell
    has SIGINT ignored, and an ignored signal stays ignored across exec: Ctrl-C tests would then
    test nothing but the runner."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_cli(args: list[str], home: Path, *, new_session: bool = False) -> subprocess.Popen:
    """`specscope ARGS` with its runs under `home`, output piped; `new_session`: in its own
    process group (Ctrl-C to the group, as a terminal sends it)."""
    env = {**os.environ, "SPECSCOPE_HOME": str(home), "COLUMNS": "120"}
    return subprocess.Popen(
        [sys.executable, "-m", "specscope.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=new_session,
        preexec_fn=_sigint_default,
    )


def run_specscope(*args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    """`specscope ARGS...` in a child process (this interpreter), output captured."""
    return subprocess.run(
        [sys.executable, "-m", "specscope.cli", *args],
        capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@dataclass
class CliResult:
    """One finished `specscope COMMAND ...` child: exit status and both streams."""

    command: str
    rc: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.stdout)

    def require(self) -> dict[str, Any]:
        """The parsed JSON of a run that exited 0 (else the failure, with its stderr's end)."""
        assert self.rc == 0, f"specscope {self.command} exited {self.rc}: {self.stderr[-2000:]}"
        return self.json


def specscope_result(command: str, *args: str, timeout_s: float = 300.0) -> CliResult:
    proc = run_specscope(command, *args, timeout_s=timeout_s)
    return CliResult(command, proc.returncode, proc.stdout, proc.stderr)


def announced_url(proc: subprocess.Popen, timeout_s: float, seen: list[str] | None = None) -> str:
    """The URL a starting `specscope serve` announces on stderr ("listening on URL"); every
    line read is appended to `seen`. Fails the test, with those lines, when none comes."""
    import re
    import time

    assert proc.stderr is not None
    lines = seen if seen is not None else []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            return m.group(1)
    raise AssertionError("server did not announce its URL: " + "".join(lines)[-2000:])
