"""`--logs-cmd CMD`: a command whose standard output is the server's log as it comes
(`journalctl -fu sglang`, `kubectl logs -f POD`, `docker logs -f NAME`), read through the same
line parsers as a tailed file. Run without a shell in its own process group (killed as a group,
as `diagnose --logs-cmd` does); when it exits it is recorded and started again at the next
window, so a watch outlives a log stream that drops. Lines wait in a bounded queue."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from specscope.telemetry.ingest import parse_line
from specscope.telemetry.records import SpecRecord
from specscope.watch.child import kill_group, start_child
from specscope.watch.passive import LINE_MAX, Fault

QUEUE_LINES = 100_000  # lines kept between two windows (the oldest dropped beyond)


@dataclass
class LogCommand:
    argv: Sequence[str]
    _proc: asyncio.subprocess.Process | None = None
    _reader: asyncio.Task[None] | None = None
    _lines: deque[bytes] = field(default_factory=lambda: deque(maxlen=QUEUE_LINES))

    async def _start(self) -> Fault | None:
        try:
            self._proc = await start_child(
                self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                limit=LINE_MAX,
            )
        except OSError as e:
            self._proc = None
            return ("log_cmd_failed", f"{self.argv[0]}: cannot run ({e.strerror or e})")
        self._reader = asyncio.create_task(self._read(self._proc))
        return None

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while True:
            try:
                line = await proc.stdout.readline()
            except ValueError:  # a line over LINE_MAX: skip it
                continue
            if not line:
                return
            self._lines.append(line)

    async def read(self) -> tuple[list[SpecRecord], list[Fault]]:
        """The records of the lines since the last read; the command (re)started as needed."""
        faults: list[Fault] = []
        if self._proc is not None and self._proc.returncode is not None:
            faults.append(("log_cmd_exited", f"{self.argv[0]}: exited {self._proc.returncode}"))
            self._proc = None
        if self._proc is None:
            problem = await self._start()
            if problem is not None:
                faults.append(problem)
        lines, self._lines = list(self._lines), deque(maxlen=QUEUE_LINES)
        records = []
        for raw in lines:
            rec = parse_line(raw.decode("utf-8", "replace"), source=self.argv[0])
            if isinstance(rec, SpecRecord):
                records.append(rec)
        return records, faults

    async def close(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            kill_group(self._proc)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._proc.wait(), 5)
        if self._reader is not None:
            self._reader.cancel()
