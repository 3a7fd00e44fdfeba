"""`--alert-cmd`: a command run for every alert, without a shell, with a timeout, the alert's
JSON line on its standard input. Its failure is recorded (an error event), never raised."""

from __future__ import annotations

from collections.abc import Sequence

from specscope.watch.child import run_child

OUTPUT_MAX = 2000  # characters of its stderr kept in the error event


async def run_alert_cmd(argv: Sequence[str], payload: str, timeout_s: float) -> str | None:
    """Run it (the canary keeps its schedule meanwhile); None when it exited 0, else one line
    saying what went wrong."""
    try:
        done = await run_child(argv, payload.encode("utf-8"), timeout_s)
    except OSError as e:
        return f"{argv[0]}: cannot run ({e.strerror or e})"
    if done.returncode is None:
        return f"{argv[0]}: still running after {timeout_s:g} s (killed)"
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip().replace("\n", " ")[-OUTPUT_MAX:]
        return f"{argv[0]}: exit {done.returncode}" + (f" ({tail})" if tail else "")
    return None
