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
from typing import Any


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
    proc = await start_child(
        argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout_s)
    except TimeoutError:
        kill_group(proc)
        await proc.wait()
        return ChildDone(None, b"", b"")
    except BaseException:  # cancelled: the watch is ending (Ctrl-C, SIGTERM)
        await _kill_and_reap(proc)
        raise
    return ChildDone(proc.returncode, out, err)


async def start_child(argv: Sequence[str], **stdio: Any) -> asyncio.subprocess.Process:
    """`argv` in a session of its own (`stdio`: create_subprocess_exec's stdin, stdout, stderr,
    limit). Cancelled while starting, the start still completes and the child's group is
    killed: a cancellation inside asyncio's own start closes the transport, kills the child
    alone and waits for its pipes, which a grandchild keeps open (the watch's exit waited out a
    60 s grandchild so, twice in a few runs of tests/test_watch_stream.py under load)."""
    starting = asyncio.ensure_future(
        asyncio.create_subprocess_exec(*argv, start_new_session=True, **stdio)
    )
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(OSError):  # a start that failed has nothing to kill
            await _kill_and_reap(await starting)
        raise


async def _kill_and_reap(proc: asyncio.subprocess.Process) -> None:
    """Kill the child's group, then reap it and drain its pipes here, before the loop closes
    (else their transport is closed by the garbage collector on a closed loop); a killed child
    ends at once."""
    kill_group(proc)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.communicate(), 5)
