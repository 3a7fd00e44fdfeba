"""An incremental Server-Sent Events parser: bytes in (in whatever pieces the socket gives),
events out.

Why hand-written: the client must stamp each raw read with `perf_counter_ns()` *before* any
parsing and then attribute the events of that read to that stamp, so the parser has to accept
arbitrary byte splits (a line, a CRLF pair or a UTF-8 character cut across two reads) and never
raise on garbage. It follows the WHATWG event-stream rules: lines end in CRLF, LF or CR; a blank
line dispatches the event; `:` starts a comment; `data` lines of one event are joined by `\\n`;
unknown fields are ignored.

A line is bounded (`max_line` bytes): a server that never sends a line end would otherwise grow
the buffer until the machine runs out of memory. Past the bound `feed` raises `LineTooLong`.
"""

from __future__ import annotations

from dataclasses import dataclass

_CR = 0x0D
_LF = 0x0A
# Far above any real event (a chunk with full logprobs is a few KiB), far below a memory problem.
MAX_LINE_BYTES = 8 << 20


class LineTooLong(Exception):
    """A line grew past the parser's bound without a line end."""

    def __init__(self, size: int, limit: int):
        super().__init__(
            f"an event-stream line grew past {limit} bytes without a line end "
            f"({size} bytes buffered)"
        )
        self.size = size
        self.limit = limit


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event. `data` is the joined `data:` lines (no trailing newline)."""

    data: str
    event: str = "message"
    id: str | None = None


class SSEParser:
    """Feed bytes with `feed`; it returns the events completed by those bytes.

    Call `close()` at end of stream: it returns an event that had data lines but no closing blank
    line (servers that end the stream right after the last `data:` line), and tells via
    `had_partial_line` whether bytes were left without a line end.
    """

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self.max_line = max_line
        self._buf = bytearray()
        self._skip_lf = False  # the previous piece ended in CR: a leading LF belongs to it
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._last_id: str | None = None
        self.comments = 0
        self.lines = 0
        self.had_partial_line = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []
        events: list[SSEEvent] = []
        buf = self._buf
        if not self._skip_lf and b"\r" not in chunk:
            # Fast path (almost every server): LF-only line ends, one split per read.
            lines = chunk.split(b"\n")
            if len(lines) == 1:
                buf += chunk
                self._check(buf)
                return events
            buf += lines[0]
            self._line(bytes(buf), events)
            buf.clear()
            for raw in lines[1:-1]:
                self._line(raw, events)
            buf += lines[-1]
            self._check(buf)
            return events
        start = 0
        n = len(chunk)
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == _LF:
                start = 1
        i = start
        while i < n:
            # Find the next line end (CR or LF) from i.
            lf = chunk.find(b"\n", i)
            cr = chunk.find(b"\r", i)
            if lf == -1 and cr == -1:
                buf += chunk[i:]
                self._check(buf)
                break
            if cr == -1 or (lf != -1 and lf < cr):
                end, nxt = lf, lf + 1
            else:
                end = cr
                if cr + 1 < n:
                    nxt = cr + 2 if chunk[cr + 1] == _LF else cr + 1
                else:
                    nxt = cr + 1
                    self._skip_lf = True
            buf += chunk[i:end]
            self._line(bytes(buf), events)
            buf.clear()
            i = nxt
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: flush a final line without terminator and a pending event."""
        events: list[SSEEvent] = []
        if self._buf:
            self.had_partial_line = True
            self._line(bytes(self._buf), events)
            self._buf.clear()
        if self._data:
            events.append(self._make())
        self._reset()
        return events

    @property
    def pending(self) -> bool:
        """True when bytes or data lines are waiting for a line end / blank line."""
        return bool(self._buf or self._data)

    # -- internals -------------------------------------------------------------------------

    def _check(self, buf: bytearray) -> None:
        if len(buf) > self.max_line:
            size = len(buf)
            buf.clear()
            raise LineTooLong(size, self.max_line)

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        self.lines += 1
        if not raw:
            if self._data:
                events.append(self._make())
            self._reset()
            return
        line = raw.decode("utf-8", errors="replace")
        if line.startswith(":"):
            self.comments += 1
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
            self._last_id = value
        # "retry" and unknown fields are ignored, as the spec says.

    def _make(self) -> SSEEvent:
        return SSEEvent(
            data="\n".join(self._data),
            event=self._event or "message",
            id=self._id if self._id is not None else self._last_id,
        )

    def _reset(self) -> None:
        self._data = []
        self._event = ""
        self._id = None
