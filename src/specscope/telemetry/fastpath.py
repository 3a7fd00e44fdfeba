"""The fast path for the story's hot line, `[YYYY-MM-DD HH:MM:SS TPn] DDTREE metrics req=R
step=S avg_accepted_drafts=A avg_commit_len=L`, used when only the summary is wanted.

A busy 8-GPU journal holds millions of these (one per verify step per rank). Here ONE compiled
regex with a literal prefix (`TP`) finds, in a single C pass over a block, both the wanted
rank's canonical lines (every field extracted by `findall`) and the other ranks' lines (only
counted, as the story's grep dropped them); identical (timestamp, rank, A, L) tuples are counted
in C (`Counter`), and Python only touches the few distinct keys. Every DDTREE line that is not
in the canonical shape (other key order, extra keys in the middle, ANSI codes, no timestamp, no
rank tag) goes through the general parser, so the result equals the general path's —
tests/test_telemetry_fuzz.py and tests/test_telemetry_engines.py check that.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from operator import itemgetter

from specscope.telemetry.markers import MarkerFinder
from specscope.telemetry.prefix import PrefixParser, _ranks
from specscope.telemetry.scan import ScanOptions
from specscope.telemetry.summary import LogSummary

MARKERS = (b"DDTREE metrics", b"DFLASH metrics", b"DSPARK metrics")
# Groups: accepted drafts, commit length (engine, req and step are not summarised).
_BODY = (
    rb"\] (?:DDTREE|DFLASH) metrics (?:req=[^\s=]+ )?(?:step=\d+ )?"
    rb"avg_accepted_drafts=(\d+(?:\.\d+)?) avg_commit_len=(\d+(?:\.\d+)?)[ \t\r]*(?=\n|$)"
)
_OTHER_TAIL = rb"\d+(?: [A-Z]+\d+)*\] D(?:DTREE|FLASH|SPARK) metrics"
# The rank tag right before the marker decides a line's rank, here and in the general path
# (scan.py filters other ranks on it before parsing, as the story's grep did).
_TS_LEN = 19  # "2026-11-29 10:00:00"
# Row = (timestamp, rank label, accepted, commit) as bytes; other-rank hits have an empty
# timestamp.
_KEY = itemgetter(1, 2, 3)
_TS = itemgetter(0)


@dataclass(frozen=True)
class FastRegexes:
    """`wanted`: canonical lines of the wanted rank; `other`: lines tagged with another rank;
    `both`: one regex doing both in a single pass (for `TPk` ranks), or None."""

    wanted: re.Pattern[bytes]
    other: re.Pattern[bytes] | None
    both: re.Pattern[bytes] | None


def compile_fast(rank: str | None) -> FastRegexes:
    """The regexes of the fast path. Each starts with a literal (`TPk` / `TP`), which lets the
    regex engine skip ahead in C; the look-behind after it reads the timestamp."""
    if rank is None:
        return FastRegexes(re.compile(rb"(TP\d+(?: [A-Z]+\d+)*)" + _BODY), None, None)
    wanted = re.escape(rank.encode())
    # findall returns (timestamp, more tags, A, L).
    canonical = (
        rb"(?<=\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) " + wanted + rb")((?: [A-Z]+\d+)*)" + _BODY
    )
    fast = re.compile(wanted + canonical)
    if not rank.startswith("TP"):  # e.g. --rank DP0: every TP-tagged line is another rank
        return FastRegexes(fast, re.compile(rb"TP" + _OTHER_TAIL), None)
    digits = wanted[2:]
    other = rb"(?!" + digits + rb"[ \]])" + _OTHER_TAIL
    # One pass: after the shared literal `TP`, either the wanted rank's canonical line (all
    # groups set) or another rank's marker (all groups empty).
    both = re.compile(rb"TP(?:" + digits + canonical + rb"|" + other + rb")")
    return FastRegexes(fast, re.compile(rb"TP" + other), both)


class FastDDTree:
    """Aggregates the canonical DDTREE lines of a block into a LogSummary."""

    def __init__(self, options: ScanOptions, prefixes: PrefixParser) -> None:
        self.options = options
        self.prefixes = prefixes
        self.regexes = compile_fast(options.rank)
        self.markers = frozenset(MARKERS)
        self.finder = MarkerFinder()
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
        None when that was every DDTREE/DFLASH/DSPARK line of the block (the block's marker
        count equals the lines matched here), else the line starts handled here (the caller
        parses the rest generally)."""
        rx = self.regexes
        total = self.finder.count(block, MARKERS)
        starts: list[int] = []
        if rx.other is None:  # every rank: the tag varies, so no look-behind; per match
            found_rows, starts = self._all_ranks(block)
            rows = Counter(found_rows)
            other = 0
        elif rx.both is not None:
            found = Counter(rx.both.findall(block))  # counted in C; few distinct rows
            other = found.pop((b"", b"", b"", b""), 0)
            rank = self.rank
            rows = Counter({(ts, rank + more, acc, com): n for (ts, more, acc, com), n in found.items()})
        else:
            rows = Counter((ts, self.rank + more, acc, com) for ts, more, acc, com in rx.wanted.findall(block))
            other = len(rx.other.findall(block))
        n_rows = rows.total()
        complete = total == n_rows + other
        if complete:
            summary.filtered_rank += other  # else the general path meets and counts them
        if rows:
            self._add_rows(rows, summary)
        if complete:
            return None
        if not starts and rows:
            starts = [m.start() for m in rx.wanted.finditer(block)]
        rfind = block.rfind
        return {rfind(b"\n", 0, s) + 1 for s in starts}

    def _all_ranks(self, block: bytes) -> tuple[list[tuple[bytes, ...]], list[int]]:
        rows: list[tuple[bytes, ...]] = []
        starts: list[int] = []
        for m in self.regexes.wanted.finditer(block):
            s = m.start()
            if block[s - _TS_LEN - 2 : s - _TS_LEN - 1] != b"[" or block[s - 1 : s] != b" ":
                continue  # not `[YYYY-MM-DD HH:MM:SS TPk`: left to the general parser
            rows.append((block[s - _TS_LEN - 1 : s - 1], *m.group(1, 2, 3)))
            starts.append(s)
        return rows, starts

    def _add_rows(self, rows: Counter[tuple[bytes, ...]], summary: LogSummary) -> None:
        """Add rows counted per distinct (timestamp, label, A, L)."""
        opts = self.options
        if opts.since is not None or opts.until is not None:
            self._add_windowed(rows, summary)
            return
        per_key: Counter[tuple[bytes, ...]] = Counter()
        for row, n in rows.items():
            per_key[_KEY(row)] += n
        for (label, acc, com), n in per_key.items():
            self._add(summary, self._rank_of(label), None, acc, com, n)
        for raw_ts in set(map(_TS, rows)):
            ts = self._ts_of(raw_ts)
            if ts is not None:
                if summary.ts_min is None or ts < summary.ts_min:
                    summary.ts_min = ts
                if summary.ts_max is None or ts > summary.ts_max:
                    summary.ts_max = ts

    def _add_windowed(self, rows: Counter[tuple[bytes, ...]], summary: LogSummary) -> None:
        since, until = self.options.since, self.options.until
        for (raw_ts, label, acc, com), n in rows.items():
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
