"""`--alert-cmd`: a command run for every alert, without a shell, with a timeout, the alert's
JSON line on its standard input. Its failure is recorded (an error event), never raised."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Sequence

OUTPUT_MAX = 2000  # characters of its stderr kept in the error event


def run_alert_cmd(argv: Sequence[str], payload: str, timeout_s: float) -> str | None:
    """Run it; None when it exited 0, else one line saying what went wrong."""
    try:
        done = subprocess.run(
            list(argv),
            input=payload.encode("utf-8"),
            capture_output=True,
            timeout=timeout_s,
            check=False,
            shell=False,
        )
    except subprocess.TimeoutExpired:
        return f"{argv[0]}: still running after {timeout_s:g} s (killed)"
    except OSError as e:
        return f"{argv[0]}: cannot run ({e.strerror or e})"
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip().replace("\n", " ")[-OUTPUT_MAX:]
        return f"{argv[0]}: exit {done.returncode}" + (f" ({tail})" if tail else "")
    return None


async def alert(argv: Sequence[str], payload: str, timeout_s: float) -> str | None:
    """run_alert_cmd off the event loop (the canary keeps its schedule meanwhile)."""
    return await asyncio.to_thread(run_alert_cmd, argv, payload, timeout_s)
