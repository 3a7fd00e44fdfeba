"""The fast path for the story's hot line, `[ts TPn] DDTREE metrics req=R step=S
avg_accepted_drafts=A avg_commit_len=L`, used when only the summary is wanted.

A busy 8-GPU journal holds millions of these (one per verify step per rank). Parsing each with
the general key=value parser costs microseconds; here one compiled regex with a literal prefix
finds the canonical shape of the wanted rank in C, identical records are counted before they
are turned into numbers, and canonical lines of other ranks are only counted. Every DDTREE line
that is not in the canonical shape (other key order, extra keys in the middle, ANSI codes,
`[DP0 TP0]` prefixes) goes through the general parser, so the result is the same as the slow
path's — the tests check that equivalence.
"""

from __future__ import annotations

import re
from collections import Counter

from specscope.telemetry.prefix import PrefixParser, _ranks
from specscope.telemetry.scan import ScanOptions
from specscope.telemetry.summary import LogSummary

MARKERS = (b"DDTREE metrics", b"DFLASH metrics")
_BODY = (
    rb"\] (DDTREE|DFLASH) metrics (?:req=([^\s=]+) )?(?:step=(\d+) )?"
    rb"avg_accepted_drafts=(\d+(?:\.\d+)?) avg_commit_len=(\d+(?:\.\d+)?)[ \t\r]*(?=\n|$)"
)
_TS_LEN = 19  # "2026-11-29 10:00:00"


def compile_fast(rank: str | None) -> tuple[re.Pattern[bytes], re.Pattern[bytes] | None]:
    """The wanted-rank regex (literal prefix `TPk`, so the regex engine skips ahead in C) and,
    with a rank filter, the regex that counts canonical lines of every other rank."""
    if rank is None:
        return re.compile(rb"(TP\d+(?: [A-Z]+\d+)*)" + _BODY), None
    wanted = re.escape(rank.encode())
    fast = re.compile(rb"(" + wanted + rb"(?: [A-Z]+\d+)*)" + _BODY)
    # Canonical lines of any other rank (the tag right before `] DDTREE metrics`, which is
    # also the rank the general parser gives such a line).
    other = re.compile(rb"TP(?=\d+(?: [A-Z]+\d+)*" + _BODY + rb")(?!" + wanted[2:] + rb"[ \]])")
    return fast, other


class FastDDTree:
    """Aggregates canonical DDTREE lines of one block into a LogSummary; returns the line
    starts it handled so that the general path can take the rest."""

    def __init__(self, options: ScanOptions, prefixes: PrefixParser) -> None:
        self.options = options
        self.prefixes = prefixes
        self.rank = options.rank
        self.fast, self.other = compile_fast(options.rank)
        self._ts: dict[bytes, float | None] = {}
        self._rank_label: dict[bytes, tuple[str | None, str | None]] = {}

    def _ts_of(self, raw: bytes) -> float | None:
        ts = self._ts.get(raw, -1.0)
        if ts == -1.0:
            if len(self._ts) > 100_000:
                self._ts.clear()
            ts = self.prefixes("[" + raw.decode("ascii", "replace") + "]").ts
            self._ts[raw] = ts
        return ts

    def scan(self, block: bytes, summary: LogSummary) -> set[int] | None:
        """Handle the canonical lines; None when that was every DDTREE line of the block,
        else the set of handled line starts (the caller parses the others generally)."""
        total = 0
        for marker in MARKERS:
            total += block.count(marker)
        if total == 0:
            return None
        opts = self.options
        since, until = opts.since, opts.until
        windowed = since is not None or until is not None
        keys: Counter[tuple[float | None, bytes, bytes, bytes, bytes]] = Counter()
        handled = 0
        slow_starts: list[int] = []
        for m in self.fast.finditer(block):
            s = m.start()
            if block[s - _TS_LEN - 2 : s - _TS_LEN - 1] != b"[" or block[s - 1 : s] != b" ":
                slow_starts.append(s)  # not `[YYYY-MM-DD HH:MM:SS TPk`: general parser
                continue
            ts = self._ts_of(block[s - _TS_LEN - 1 : s - 1])
            if ts is None:
                slow_starts.append(s)
                continue
            label, engine, _req, _step, acc, com = m.groups()
            handled += 1
            if windowed and (
                (since is not None and ts < since) or (until is not None and ts >= until)
            ):
                summary.filtered_time += 1
                continue
            keys[(ts, label, engine, acc, com)] += 1
        other = 0
        if self.other is not None:
            other = len(self.other.findall(block))
            summary.filtered_rank += other
        for (ts, label, _engine, acc, com), n in keys.items():
            rank = self._rank_label.get(label)
            if rank is None:
                rank = self._rank_label[label] = _ranks(label.decode("ascii", "replace"))
            accepted, commit = float(acc), float(com)
            summary.add(
                {
                    "format": "ddtree",
                    "ts": ts,
                    "rank": rank[0],
                    "commit_len": commit,
                    "accepted_drafts": accepted,
                    "n_steps": 1,
                    "scope": "step",
                },
                n,
            )
        if handled + other == total:
            return None
        return self._handled_starts(block, slow_starts)

    def _handled_starts(self, block: bytes, slow: list[int]) -> set[int]:
        """Line starts of every line this path accounted for (rare: only when a block also
        holds non-canonical DDTREE lines)."""
        slow_set = set(slow)
        starts = set()
        rfind = block.rfind
        for m in self.fast.finditer(block):
            if m.start() not in slow_set:
                starts.add(rfind(b"\n", 0, m.start()) + 1)
        if self.other is not None:
            for m in self.other.finditer(block):
                starts.add(rfind(b"\n", 0, m.start()) + 1)
        return starts
