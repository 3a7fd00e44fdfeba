"""The real CLI in a child process, as a terminal would start it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


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
    return subprocess.Popen([sys.executable, "-m", "specscope.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=new_session, preexec_fn=_sigint_default)
