"""Per-step speculative metric lines: the story's `DDTREE metrics ... avg_accepted_drafts=A
avg_commit_len=L` (also `DFLASH metrics`), and lucebox-style `[spec-decode] ... avg_commit=X`
/ `[hybrid-spec] ... avg_commit=X AL=Y` summaries (observability.md §1d).

The DDTREE line is the seed story's decisive evidence and the bulk of a speculative server's
log, so it has two readers side by side: the general parser (`parse_ddtree`: one regex for the
marker, one for the key=value body) and the block fast path (`DDTreeBlockFast`), used when only
the summary is wanted.

The fast path reads the story's hot line, `[YYYY-MM-DD HH:MM:SS TPn] DDTREE metrics req=R
step=S avg_accepted_drafts=A avg_commit_len=L`. A busy 8-GPU journal holds millions of these
(one per verify step per rank). ONE compiled regex with a literal prefix (`TP`) finds, in a
single C pass over a block, both the wanted rank's canonical lines (every field extracted by
`findall`) and the other ranks' lines (only counted, as the story's grep dropped them);
identical (timestamp, rank, A, L) tuples are counted in C (`Counter`), and Python only touches
the few distinct keys. Every DDTREE line that is not in the canonical shape (other key order,
extra keys in the middle, ANSI codes, no timestamp, no rank tag) goes through the general
parser, so the result equals the general path's: tests/test_telemetry_fuzz.py and
tests/test_telemetry_engines.py check that.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from operator import itemgetter

from specscope.telemetry.markers import MarkerFinder
from specscope.telemetry.prefix import PrefixParser, split_ranks
from specscope.telemetry.records import Malformed, Parsed, integer, number
from specscope.telemetry.scan import LineFormat, ScanOptions
from specscope.telemetry.summary import LogSummary

MARKERS = (b"DDTREE metrics", b"DFLASH metrics", b"DSPARK metrics")
_METRICS = re.compile(r"\b(DDTREE|DFLASH|DSPARK) metrics\b")
# The rank tag right before the marker wins over any earlier one (a journal prefix may hold
# other bracketed text). The scanner filters other ranks on the bytes form before parsing (as
# the story's grep did), the fast path reads ranks the same way.
_RANK_BEFORE = re.compile(r"(TP\d+(?: [A-Z]+\d+)*)\]\s*$")
RANK_TAG_BEFORE = re.compile(rb"(TP\d+)(?: [A-Z]+\d+)*\] $")
_KV = re.compile(r"([A-Za-z_][\w.-]*)=(\S*)")
_INT_KEYS = {"step", "bs", "batch", "n", "tokens", "num_steps", "n_steps"}


def _kv_fields(body: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, raw in _KV.findall(body):
        raw = raw.rstrip(",;")
        if key in ("req", "rid", "request_id", "id"):
            out[key] = raw
            continue
        value: object = integer(raw) if key in _INT_KEYS else None
        if value is None:
            value = number(raw)
        out[key] = raw if value is None else value
    return out


def parse_ddtree(line: str, prefixes: PrefixParser) -> Parsed | Malformed | None:
    """`[ts TP0] DDTREE metrics req=R step=S avg_accepted_drafts=A avg_commit_len=L` -> one
    verify step (scope `step`); either number alone is enough (L = A + 1)."""
    m = _METRICS.search(line)
    if m is None:
        return None
    fields = _kv_fields(line[m.end() :])
    accepted = fields.pop("avg_accepted_drafts", None)
    commit = fields.pop("avg_commit_len", None)
    accepted = accepted if isinstance(accepted, float | int) else None
    commit = commit if isinstance(commit, float | int) else None
    if accepted is None and commit is None:
        return Malformed("ddtree", "no numeric avg_accepted_drafts= or avg_commit_len=")
    if commit is None:
        commit = accepted + 1.0  # type: ignore[operator]
    elif accepted is None:
        accepted = commit - 1.0
    prefix = line[: m.start()]
    pre = prefixes(prefix)
    rank = pre.rank
    tag = _RANK_BEFORE.search(prefix)
    if tag:
        rank = tag.group(1).split()[0]
    req = fields.pop("req", None) or fields.pop("rid", None) or fields.pop("request_id", None)
    step = fields.pop("step", None)
    fields["engine"] = m.group(1)
    return {
        "format": "ddtree",
        "ts": pre.ts,
        "rank": rank,
        "request_id": None if req is None else str(req),
        "step": step if isinstance(step, int) else None,
        "commit_len": float(commit),
        "accepted_drafts": float(accepted),
        "n_steps": 1,
        "scope": "step",
        "fields": fields,
    }


_AVG_COMMIT = re.compile(r"\bavg_commit=")
_TAG = re.compile(r"\[([\w-]+)\]")
_ACCEPTED = re.compile(r"\baccepted=(\d+)/(\d+)")
_PERCENT = re.compile(r"\((\d+(?:\.\d+)?)%\)")


def parse_avg_commit(line: str, prefixes: PrefixParser) -> Parsed | Malformed | None:
    """lucebox `[spec-decode] tokens=256 accepted=213/256 (83.2%) avg_commit=8.53` (one request
    or interval; steps ~= tokens / avg_commit) and `[hybrid-spec] ... avg_commit=X AL=Y`."""
    m = _AVG_COMMIT.search(line)
    if m is None:
        return None
    tag = _TAG.search(line, 0, m.start())
    fields = _kv_fields(line[tag.end() :] if tag else line)
    commit = fields.pop("avg_commit", None)
    if not isinstance(commit, float | int):
        return Malformed("avg_commit", "avg_commit= is not a number")
    if tag:
        fields["tag"] = tag.group(1)
    accept_rate = None
    acc = _ACCEPTED.search(line)
    if acc:
        fields["accepted"] = int(acc.group(1))
        fields["proposed"] = int(acc.group(2))
        if int(acc.group(2)) > 0:
            accept_rate = int(acc.group(1)) / int(acc.group(2))
    else:
        pct = _PERCENT.search(line)
        if pct:
            accept_rate = float(pct.group(1)) / 100.0
    tokens = fields.get("tokens")
    n_steps = round(tokens / commit) if isinstance(tokens, int) and commit > 0 else None
    pre = prefixes(line[: tag.start()] if tag else "")
    return {
        "format": "avg_commit",
        "ts": pre.ts,
        "rank": pre.rank,
        "commit_len": float(commit),
        "accepted_drafts": float(commit) - 1.0,
        "accept_rate": accept_rate,
        "n_steps": n_steps,
        "scope": "interval",
        "fields": fields,
    }


# -- the block fast path ----------------------------------------------------------------------

# Groups: accepted drafts, commit length (engine, req and step are not summarised).
_BODY = (
    rb"\] (?:DDTREE|DFLASH) metrics (?:req=[^\s=]+ )?(?:step=\d+ )?"
    rb"avg_accepted_drafts=(\d+(?:\.\d+)?) avg_commit_len=(\d+(?:\.\d+)?)[ \t\r]*(?=\n|$)"
)
_OTHER_TAIL = rb"\d+(?: [A-Z]+\d+)*\] D(?:DTREE|FLASH|SPARK) metrics"
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


class DDTreeBlockFast:
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
        return (
            base + sec if sec < 60 else self.prefixes("[" + raw.decode("ascii", "replace") + "]").ts
        )

    def _rank_of(self, label: bytes) -> str | None:
        if label not in self._rank:
            self._rank[label] = split_ranks(label.decode("ascii", "replace"))[0]
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
            rows = Counter(
                {(ts, rank + more, acc, com): n for (ts, more, acc, com), n in found.items()}
            )
        else:
            rows = Counter(
                (ts, self.rank + more, acc, com) for ts, more, acc, com in rx.wanted.findall(block)
            )
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


DDTREE = LineFormat(
    "ddtree",
    "ddtree",
    MARKERS,
    parse_ddtree,
    block_fast=DDTreeBlockFast,
    rank_tag_before_marker=RANK_TAG_BEFORE,
)
AVG_COMMIT = LineFormat("avg_commit", "ddtree", (b"avg_commit=",), parse_avg_commit)
