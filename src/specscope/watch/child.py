"""A command the watch runs from its event loop (`--alert-cmd`, `--diagnose-on-alert`): without a
shell, with a timeout, and gone when the watch goes.

Run through asyncio's subprocess support rather than `subprocess.run` in a thread: at Ctrl-C,
`asyncio.run` cancels the loop's tasks but waits for every thread still running, so a diagnosis
in a thread held the watch's exit for up to its 900 s timeout. Here cancelling the task kills the
child (its whole process group: a command may start children of its own) and the exit is
immediate.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ChildDone:
    returncode: int | None  # None: killed at the timeout
    stdout: bytes
    stderr: bytes


def kill_group(proc: asyncio.subprocess.Process) -> None:
    """A child started with start_new_session, and whatever it started, at once."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


async def run_child(argv: Sequence[str], stdin: bytes | None, timeout_s: float) -> ChildDone:
    """Run `argv` with `stdin` (None: nothing), its output captured. OSError when it cannot
    start (a missing command); returncode None when it outlived `timeout_s` (killed)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its group is ours to kill; a terminal's Ctrl-C reaches us
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout_s)
    except TimeoutError:
        kill_group(proc)
        await proc.wait()
        return ChildDone(None, b"", b"")
    except BaseException:  # cancelled: the watch is ending (Ctrl-C, SIGTERM)
        kill_group(proc)
        # reaped and its pipes drained here, before the loop closes (else their transport is
        # closed by the garbage collector on a closed loop); a killed child ends at once
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.communicate(), 5)
        raise
    return ChildDone(proc.returncode, out, err)
