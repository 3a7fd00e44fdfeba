"""What every real peer server shares: a child process in its own process group, a log file, a
bounded wait until an HTTP readiness URL answers 200, a one-line failure with the log's tail, a
stop that takes its whole process tree down, a watchdog that takes it down when the process that
started it dies without stopping it (killed, or a crash), and "run this command while it serves".

A peer (llama.cpp, vLLM) subclasses `PeerServer` and says how to spawn itself (`_spawn`) and how
it learns its URL (`_discover_url`: read from the child, or known up front from a free port).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

LOG_TAIL_LINES = 5
# How long a stop waits for the group to leave after SIGTERM before SIGKILL.
STOP_GRACE_S = 15.0

# The watchdog (`watch_group` in a child interpreter): its stdin is a pipe whose only write end
# this process holds. A clean stop writes a byte first (nothing to do); end of file with nothing
# read means this process is gone, so the server's group is terminated as stop() would.
_WATCHDOG = (
    "import sys; from specscope.peers.launcher import watch_group; watch_group(sys.argv[1:])"
)


class PeerServerError(RuntimeError):
    """The peer server did not start or answer; the message is one line meant for the user."""


def get_status(url: str, timeout_s: float) -> int | None:
    """HTTP status of a GET, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:  # 503 while loading
        return int(exc.code)
    except (OSError, ValueError):
        return None


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now on `host` (for servers that cannot bind port 0 and report it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last non-empty lines of a log, joined with ' | ' (empty if unreadable)."""
    with contextlib.suppress(OSError):
        kept = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        return " | ".join(kept[-lines:])
    return ""


class PeerServer:
    """Context manager: a peer server in a child process group, ready on entry, gone on exit.

    `url` is the base URL; `log_path` is the server's own log (stdout+stderr, or stderr alone when
    the child reports its URL on stdout), kept after exit unless the caller passed none (then it
    lives in a temporary folder removed on exit).
    """

    name = "peer"
    ready_path = "/health"
    log_file_name = "server.log"

    def __init__(self, *, label: str, log_path: Path | None, start_timeout_s: float) -> None:
        self.label = label
        self.start_timeout_s = start_timeout_s
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        if log_path is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix=f"specscope-peer-{label}-")
            log_path = Path(self._tmpdir.name) / self.log_file_name
        self.log_path = Path(log_path)
        self.url = ""
        self.startup_s: float | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def process(self) -> subprocess.Popen[str] | None:
        """The server's process (its group leader) while it runs; None before start and once
        stopped and reaped."""
        return self._proc

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- what a peer defines -------------------------------------------------------------
    def _prepare(self) -> None:
        """Check inputs in this process, so that a missing file fails in one line, early."""

    def _spawn(self, log: IO[str]) -> subprocess.Popen[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _discover_url(self, deadline: float) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    # --- shared mechanism ----------------------------------------------------------------
    def _popen(
        self,
        argv: Sequence[str],
        log: IO[str],
        *,
        env: Mapping[str, str] | None = None,
        stdout_pipe: bool = False,
    ) -> subprocess.Popen[str]:
        """The child leads a new session, so that stop() can signal its whole tree."""
        return subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, text=True, start_new_session=True,
            stdout=subprocess.PIPE if stdout_pipe else log, stderr=log,
            env=dict(env) if env is not None else None,
        )  # fmt: skip

    def start(self) -> None:
        self._prepare()
        started = time.monotonic()
        deadline = started + self.start_timeout_s
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("w") as log:
            self._proc = self._spawn(log)
        self._watchdog = _start_watchdog(self._proc.pid)
        self.url = self._discover_url(deadline)
        self._wait_ready(deadline)
        self.startup_s = time.monotonic() - started

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                break
            if get_status(f"{self.url}{self.ready_path}", timeout_s=2.0) == 200:
                return
            time.sleep(0.3)
        raise PeerServerError(self._startup_failure("did not become ready"))

    def _startup_failure(self, what: str) -> str:
        rc = self._proc.poll() if self._proc is not None else None
        tail = log_tail(self.log_path)
        state = f"exited with {rc}" if rc is not None else f"within {self.start_timeout_s:.0f} s"
        return f"{self.name} server ({self.label}) {what} ({state}); log {self.log_path}" + (
            f"; last log lines: {tail}" if tail else ""
        )

    def stop(self, timeout_s: float = STOP_GRACE_S) -> None:
        """SIGTERM to the process group (server and its workers), then SIGKILL after a grace."""
        proc, self._proc = self._proc, None
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            _stand_down(watchdog)  # before the group goes: its id must not be signalled once free
        if proc is not None:
            _terminate_group(proc, timeout_s)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None


def _start_watchdog(pgid: int) -> subprocess.Popen[bytes]:
    """A small process that terminates group `pgid` once this process is gone (see _WATCHDOG)."""
    return subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(pgid), str(STOP_GRACE_S)], stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def _stand_down(watchdog: subprocess.Popen[bytes]) -> None:
    """A clean stop: the watchdog reads its byte and exits without touching the group."""
    assert watchdog.stdin is not None
    with contextlib.suppress(OSError):  # a watchdog that died already has nothing to read
        watchdog.stdin.write(b"s")
    with contextlib.suppress(OSError):
        watchdog.stdin.close()
    try:
        watchdog.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        watchdog.kill()
        watchdog.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _group_alive(pgid)


def _kill_stragglers(pgid: int, grace_s: float) -> None:
    """After a SIGTERM: SIGKILL what is left of the group after `grace_s`, then wait (as long
    again) for it to be empty, since a killed process stays in the group until it is reaped (on
    a loaded machine vLLM's EngineCore was still there just after a stop returned)."""
    if not _wait_gone(pgid, grace_s):
        _signal_group(pgid, signal.SIGKILL)
        _wait_gone(pgid, grace_s)


def _terminate_group(proc: subprocess.Popen[str], timeout_s: float) -> None:
    pgid = proc.pid  # start_new_session: the child's pid is its group's id
    _signal_group(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal_group(pgid, signal.SIGKILL)
        proc.wait(timeout=timeout_s)
    # Workers can outlive their leader by a moment (or for good, if they ignore SIGTERM).
    _kill_stragglers(pgid, timeout_s)


def watch_group(argv: Sequence[str]) -> None:
    """The watchdog's body (argv: PGID GRACE_S): block on stdin; a stand-down byte ends it,
    end of file (its starter gone) terminates the group, SIGKILL after the grace. Ctrl-C is
    ignored: the terminal's Ctrl-C must not take the watchdog before the stop it covers (it has
    a session of its own, so it gets none anyway unless sent to it)."""
    pgid, grace_s = int(argv[0]), float(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.stdin.buffer.read(1):
        return
    _signal_group(pgid, signal.SIGTERM)
    _kill_stragglers(pgid, grace_s)


def run_command(server: PeerServer, command: Sequence[str], *, timeout_s: float) -> int:
    """Run `command` (no shell) with `{url}` / `{log}` filled in while `server` serves.

    Returns the command's exit status; 2 when it does not exist, 1 when it runs past `timeout_s`.
    """
    argv = [a.replace("{url}", server.url).replace("{log}", str(server.log_path)) for a in command]
    print(f"{server.name} ({server.label}) at {server.url}; running: {' '.join(argv)}",
          file=sys.stderr)  # fmt: skip
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, timeout=timeout_s).returncode
    except FileNotFoundError:
        print(f"error: command not found: {argv[0]}", file=sys.stderr)
        return 2
    except subprocess.TimeoutExpired:
        print(f"error: {argv[0]} did not finish within {timeout_s:.0f} s", file=sys.stderr)
        return 1


def peer_parser(prog: str, serves: str) -> argparse.ArgumentParser:
    """The argument parser a peer's `python -m` main starts from: `serves` says what it serves
    (e.g. "SmolLM2 with vLLM (CPU build)"); the peer adds its own flags, then
    `add_command_arguments`."""
    return argparse.ArgumentParser(
        prog=prog,
        description=f"Serve {serves} for specscope to measure. With a command after `--`, serve "
        "only while it runs ({url} and {log} are filled in), e.g. "
        "`-- specscope diagnose {url} --quick --logs {log}`.",
    )


def add_command_arguments(parser: argparse.ArgumentParser, log_help: str) -> None:
    """--log, --timeout and the command after `--` (read back with `split_command`)."""
    parser.add_argument("--log", type=Path, default=None, help=log_help)
    parser.add_argument(
        "--timeout", type=float, default=3600.0, help="with a command: its limit, s"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS... to run")


def split_command(remainder: list[str]) -> list[str]:
    """argparse.REMAINDER keeps the `--` separator; the command is what follows it."""
    return remainder[1:] if remainder[:1] == ["--"] else remainder
