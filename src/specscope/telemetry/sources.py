"""Where log bytes come from: files (plain or gzip), stdin, or a command run without a shell.

Every source yields blocks of whole lines (large reads: per-line I/O would dominate on big
journals). Problems that lose nothing already read (a truncated gzip, a command that timed out
after printing) become warnings on the `SourceLog`; problems that leave nothing to read (a
missing file, a command that does not exist) raise `SourceError` with a one-line message.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shlex
import signal
import stat
import subprocess
import sys
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

# Small enough to stay in the CPU cache while every format's marker search passes over it
# (measured: 512 KiB blocks scan ~30% faster than 8 MiB ones), large enough that per-block
# Python overhead is negligible.
BLOCK_SIZE = 512 << 10
DEFAULT_COMMAND_TIMEOUT_S = 30.0
_GZIP_MAGIC = b"\x1f\x8b"


class SourceError(Exception):
    """Input that cannot be read at all; the message is one line naming the input."""


@dataclass
class SourceLog:
    """Non-fatal problems met while reading, and how much an over-long line cap dropped."""

    warnings: list[str] = field(default_factory=list)
    oversized_lines: int = 0


def whole_lines(chunks: Iterable[bytes], max_line: int, log: SourceLog) -> Iterator[bytes]:
    """Re-cut arbitrary chunks into blocks that end at a newline; a line longer than
    `max_line` with no newline in sight is dropped (counted), never buffered without bound."""
    carry = b""
    skipping = False  # inside an over-long line: drop bytes until its newline
    for chunk in chunks:
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk = chunk[nl + 1 :]
            skipping = False
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) > max_line:
                log.oversized_lines += 1
                carry, skipping = b"", True
            else:
                carry = data
            continue
        yield data[: cut + 1]
        carry = data[cut + 1 :]
        if len(carry) > max_line:
            log.oversized_lines += 1
            carry, skipping = b"", True
    if carry:
        yield carry


def _read_raw(stream: BinaryIO, block_size: int) -> Iterator[bytes]:
    while True:
        chunk = stream.read(block_size)
        if not chunk:
            return
        yield chunk


def _gunzip(
    first: bytes, stream: BinaryIO, name: str, log: SourceLog, block_size: int
) -> Iterator[bytes]:
    """Streamed gzip (multi-member too). A truncated or corrupt tail keeps what was decoded."""
    d = zlib.decompressobj(wbits=31)
    in_member = False
    out_total = 0
    pending = first
    while True:
        if not pending:
            pending = stream.read(block_size)
            if not pending:
                break
        try:
            while True:
                if pending:
                    in_member = True
                out = d.decompress(pending, block_size)
                pending = d.unconsumed_tail
                if out:
                    out_total += len(out)
                    yield out
                if d.eof:
                    in_member = False
                    rest = d.unused_data
                    d = zlib.decompressobj(wbits=31)
                    pending = rest if rest.startswith(_GZIP_MAGIC) else b""
                if not pending and len(out) < block_size:
                    break
        except zlib.error as exc:
            log.warnings.append(
                f"{name}: corrupt gzip data after {out_total} decompressed bytes ({exc}); "
                "kept what was read"
            )
            return
    if in_member:
        log.warnings.append(
            f"{name}: truncated gzip (no end-of-stream marker); kept the {out_total} bytes read"
        )


def file_chunks(path: str, log: SourceLog, block_size: int = BLOCK_SIZE) -> Iterator[bytes]:
    """Raw chunks of a file, gunzipped when it starts with the gzip magic (any extension)."""
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed in finally; generator owns it
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SourceError(f"{path}: is a directory, expected a log file") from None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        try:
            first = stream.read(block_size)
        except OSError as exc:
            raise SourceError(f"{path}: cannot read ({exc.strerror or exc})") from None
        if first.startswith(_GZIP_MAGIC):
            yield from _gunzip(first, stream, path, log, block_size)
        else:
            if _is_regular(stream):
                yield from _line_aligned(stream.fileno(), block_size, 0)  # `first` re-read: cut
                return
            if first:
                yield first
            yield from _read_raw(stream, block_size)
    finally:
        stream.close()


def file_range_chunks(
    path: str, start: int, stop: int, block_size: int = BLOCK_SIZE
) -> Iterator[bytes]:
    """Blocks of bytes [start, stop) of a plain file (a parallel worker's share), cut after
    newlines like `file_chunks`."""
    with open(path, "rb") as stream:
        yield from _line_aligned(stream.fileno(), block_size, start, stop)


def _is_regular(stream: BinaryIO) -> bool:
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError):
        return False


def _line_aligned(fd: int, block_size: int, start: int, stop: int | None = None) -> Iterator[bytes]:
    """Positioned reads (`pread`) of a regular file from `start` to `stop` (default: its end),
    each block cut after its last newline and the next read starting there. Why: then
    `whole_lines` passes every block on as is, where reads of arbitrary length cost two extra
    copies of the whole file (joining the carried partial line, then cutting at the newline).
    A block without a newline (a line longer than `block_size`) is yielded raw and
    `whole_lines` re-cuts it as before. Plain reads, not mmap: a log truncated by rotation
    while it is read must end the read, not kill the process with SIGBUS."""
    pos = start
    while stop is None or pos < stop:
        want = block_size if stop is None else min(block_size, stop - pos)
        data = os.pread(fd, want, pos)
        if not data:
            return
        if len(data) == want and (stop is None or pos + want < stop):
            cut = data.rfind(b"\n") + 1
            if 0 < cut < len(data):
                data = data[:cut]
        pos += len(data)
        yield data


def stdin_chunks(log: SourceLog, block_size: int = BLOCK_SIZE) -> Iterator[bytes]:
    stream = sys.stdin.buffer
    first = stream.read(block_size)
    if first.startswith(_GZIP_MAGIC):
        yield from _gunzip(first, stream, "-", log, block_size)
        return
    if first:
        yield first
    yield from _read_raw(stream, block_size)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the command's process group (what is left of it: children that outlived it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.kill()


def command_chunks(
    command: str, log: SourceLog, timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S
) -> Iterator[bytes]:
    """stdout of `command` (split with shlex, run WITHOUT a shell) until it exits or the
    timeout passes. Output already printed is kept when it then fails or hangs; a command that
    cannot start, or fails having printed nothing, raises SourceError."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise SourceError(f"--logs-cmd {command!r}: cannot split into arguments ({exc})") from None
    if not argv:
        raise SourceError("--logs-cmd is empty")
    if not timeout_s > 0:
        raise SourceError(f"--logs-cmd timeout must be > 0 seconds, got {timeout_s:g}")
    try:
        # Its own process group: on timeout the whole group is killed, so a child it started
        # (`sh -c 'sleep 999; ...'`) cannot outlive us holding the pipe open.
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise SourceError(f"--logs-cmd: command not found: {argv[0]}") from None
    except OSError as exc:
        raise SourceError(f"--logs-cmd: cannot run {argv[0]}: {exc.strerror or exc}") from None
    assert proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    err_tail = b""
    produced = 0
    timed_out = False
    try:
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(min(remaining, 1.0)):
                data = os.read(key.fd, 1 << 20)
                if not data:
                    sel.unregister(key.fileobj)
                elif key.data == "out":
                    produced += len(data)
                    yield data
                else:
                    err_tail = (err_tail + data)[-2000:]
    finally:
        sel.close()
        _kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        proc.stdout.close()
        proc.stderr.close()
    err_line = err_tail.decode("utf-8", "replace").strip().splitlines()
    why = f": {err_line[-1][:200]}" if err_line else ""
    if timed_out:
        msg = f"--logs-cmd {argv[0]!r} did not finish within {timeout_s:g}s (killed)"
        if not produced:
            raise SourceError(msg + "; it printed nothing")
        log.warnings.append(msg + f"; kept the {produced} bytes it printed")
    elif proc.returncode:
        msg = f"--logs-cmd {argv[0]!r} exited with status {proc.returncode}{why}"
        if not produced:
            raise SourceError(msg)
        log.warnings.append(msg + f"; kept the {produced} bytes it printed")
