"""The fast path for the story's hot line, `[YYYY-MM-DD HH:MM:SS TPn] DDTREE metrics req=R
step=S avg_accepted_drafts=A avg_commit_len=L`, used when only the summary is wanted.

A busy 8-GPU journal holds millions of these (one per verify step per rank). Here one compiled
regex with a literal prefix (`[20`) extracts every field of every canonical line of a block in
C (`findall`), identical (rank, engine, A, L) tuples are counted in C (`Counter(map(...))`), and
Python only touches the few distinct keys. Every DDTREE line that is not in the canonical shape
(other key order, extra keys in the middle, ANSI codes, no timestamp) goes through the general
parser, so the result equals the general path's — tests/test_telemetry_fuzz.py checks that.
"""

from __future__ import annotations

import re
from collections import Counter
from operator import itemgetter

from specscope.telemetry.prefix import PrefixParser, _ranks
from specscope.telemetry.scan import ScanOptions
from specscope.telemetry.summary import LogSummary

MARKERS = (b"DDTREE metrics", b"DFLASH metrics", b"DSPARK metrics")
_BODY = (
    rb"\] (DDTREE|DFLASH) metrics (?:req=([^\s=]+) )?(?:step=(\d+) )?"
    rb"avg_accepted_drafts=(\d+(?:\.\d+)?) avg_commit_len=(\d+(?:\.\d+)?)[ \t\r]*(?=\n|$)"
)
# The rank tag right before the marker decides a line's rank, here and in the general path
# (scan.py filters other ranks on it before parsing, as the story's grep did).
_TS_LEN = 19  # "2026-11-29 10:00:00"
# Row = (timestamp, rank label, engine, accepted, commit) as bytes.
_KEY = itemgetter(1, 2, 3, 4)
_KEY_TS = itemgetter(0, 1, 2, 3, 4)
_TS = itemgetter(0)


def compile_fast(rank: str | None) -> tuple[re.Pattern[bytes], re.Pattern[bytes] | None]:
    """The wanted-rank regex (its literal prefix `TPk` lets the regex engine skip ahead in C)
    and, with a rank filter, the regex that finds lines tagged with any other rank."""
    if rank is None:
        return re.compile(rb"(TP\d+(?: [A-Z]+\d+)*)" + _BODY), None
    wanted = re.escape(rank.encode())
    # The look-behind sits after the literal `TPk`, so the regex engine still skips ahead to
    # each `TPk` in C, and findall returns (timestamp, more tags, engine, req, step, A, L).
    fast = re.compile(
        wanted
        + rb"(?<=\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) "
        + wanted
        + rb")((?: [A-Z]+\d+)*)"
        + _BODY
    )
    if not rank.startswith("TP"):  # e.g. --rank DP0: every TP-tagged line is another rank
        return fast, re.compile(rb"TP\d+(?: [A-Z]+\d+)*\] D(?:DTREE|FLASH|SPARK) metrics")
    other = re.compile(
        rb"TP(?!" + wanted[2:] + rb"[ \]])\d+(?: [A-Z]+\d+)*\] D(?:DTREE|FLASH|SPARK) metrics"
    )
    return fast, other


class FastDDTree:
    """Aggregates the canonical DDTREE lines of a block into a LogSummary."""

    def __init__(self, options: ScanOptions, prefixes: PrefixParser) -> None:
        self.options = options
        self.prefixes = prefixes
        self.fast, self.other = compile_fast(options.rank)
        self.rank = (options.rank or "").encode()
        self._ts: dict[bytes, float | None] = {}
        self._rank: dict[bytes, str | None] = {}

    def _ts_of(self, raw: bytes) -> float | None:
        """Unix time of `YYYY-MM-DD HH:MM:SS` (local), cached per minute: DST shifts happen on
        whole hours, so minute start + seconds is exact."""
        minute = raw[:16]
        base = self._ts.get(minute, -1.0)
        if base == -1.0:
            if len(self._ts) > 100_000:
                self._ts.clear()
            base = self.prefixes("[" + minute.decode("ascii", "replace") + ":00]").ts
            self._ts[minute] = base
        if base is None:
            return None
        sec = int(raw[17:19])
        return base + sec if sec < 60 else self.prefixes("[" + raw.decode("ascii", "replace") + "]").ts

    def _rank_of(self, label: bytes) -> str | None:
        if label not in self._rank:
            self._rank[label] = _ranks(label.decode("ascii", "replace"))[0]
        return self._rank[label]

    def scan(self, block: bytes, summary: LogSummary) -> set[int] | None:
        """Count the canonical lines of the wanted rank and the lines of other ranks; returns
        None when that was every DDTREE/DFLASH/DSPARK line of the block, else the line starts
        handled here (the caller parses the rest generally)."""
        total = block.count(b" metrics ")
        if self.other is None:  # every rank: the tag varies, so no look-behind; per match
            rows, starts = self._all_ranks(block)
        else:
            rows = [(ts, self.rank + more, eng, acc, com) for ts, more, eng, _r, _s, acc, com in self.fast.findall(block)]
            starts = []
        other = len(self.other.findall(block)) if self.other is not None else 0
        if total != len(rows) + other:
            total = sum(block.count(m) for m in MARKERS)
        complete = total == len(rows) + other
        if complete:
            summary.filtered_rank += other  # else the general path meets and counts them
        if rows:
            self._add_rows(rows, summary)
        if complete:
            return None
        if not starts and rows:
            starts = [m.start() for m in self.fast.finditer(block)]
        rfind = block.rfind
        return {rfind(b"\n", 0, s) + 1 for s in starts}

    def _all_ranks(self, block: bytes) -> tuple[list[tuple[bytes, ...]], list[int]]:
        rows: list[tuple[bytes, ...]] = []
        starts: list[int] = []
        for m in self.fast.finditer(block):
            s = m.start()
            if block[s - _TS_LEN - 2 : s - _TS_LEN - 1] != b"[" or block[s - 1 : s] != b" ":
                continue  # not `[YYYY-MM-DD HH:MM:SS TPk`: left to the general parser
            rows.append((block[s - _TS_LEN - 1 : s - 1], *m.group(1, 2, 5, 6)))
            starts.append(s)
        return rows, starts

    def _add_rows(self, rows: list[tuple[bytes, ...]], summary: LogSummary) -> None:
        opts = self.options
        if opts.since is not None or opts.until is not None:
            self._add_windowed(rows, summary)
            return
        for (label, _engine, acc, com), n in Counter(map(_KEY, rows)).items():
            self._add(summary, self._rank_of(label), None, acc, com, n)
        for raw_ts in set(map(_TS, rows)):
            ts = self._ts_of(raw_ts)
            if ts is not None:
                if summary.ts_min is None or ts < summary.ts_min:
                    summary.ts_min = ts
                if summary.ts_max is None or ts > summary.ts_max:
                    summary.ts_max = ts

    def _add_windowed(self, rows: list[tuple[bytes, ...]], summary: LogSummary) -> None:
        since, until = self.options.since, self.options.until
        for (raw_ts, label, _engine, acc, com), n in Counter(map(_KEY_TS, rows)).items():
            ts = self._ts_of(raw_ts)
            if ts is None:
                summary.undated += n
                continue
            if (since is not None and ts < since) or (until is not None and ts >= until):
                summary.filtered_time += n
                continue
            self._add(summary, self._rank_of(label), ts, acc, com, n)

    @staticmethod
    def _add(
        summary: LogSummary, rank: str | None, ts: float | None, acc: bytes, com: bytes, n: int
    ) -> None:
        summary.add(
            {
                "format": "ddtree",
                "ts": ts,
                "rank": rank,
                "commit_len": float(com),
                "accepted_drafts": float(acc),
                "n_steps": 1,
                "scope": "step",
            },
            n,
        )
