"""The block scanner: finds candidate lines by marker search over large byte blocks and
parses only those.

Why blocks and markers: a server journal is mostly lines no format cares about. Splitting a
1 GB file into Python lines costs more than everything else together, so the scanner instead
finds every format's marker in one Aho-Corasick pass over a block (markers.py; C/Rust speed),
cuts out just the line around each hit, decodes and cleans it, and hands it to the format's
parser. The scanner names no format: a format brings its markers, its parser and, optionally,
fast paths used when only the summary is wanted (a block fast path counts a whole block's
canonical lines at once, as the DDTREE format does for the bulk of a speculative server's log;
a line fast path matches one canonical line with one regex, as the SGLang and vLLM interval
formats do). Formats without a marker (a user `--pattern`) fall back to a per-line loop.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specscope.telemetry.markers import MarkerFinder
from specscope.telemetry.prefix import PrefixParser
from specscope.telemetry.records import Malformed, Parsed, SpecRecord, to_record
from specscope.telemetry.summary import LogSummary

_CONTROL_BYTES = bytes(range(0x20)) + b"\x7f"
_ANSI_B = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
_NUMPY_COUNT_MIN = 1 << 16  # below this, bytes.count beats numpy's call overhead
DEFAULT_MAX_LINE = 1 << 20  # longer lines are skipped and counted (binary dumps, base64 blobs)
MALFORMED_EXAMPLES = 5


LineParser = Callable[[str, PrefixParser], "Parsed | Malformed | None"]


@dataclass(frozen=True)
class LineFormat:
    """One log format: the substrings that must occur in a line (cheap prefilter, checked on
    raw bytes before any regex) and the parser for a line that contains one of them."""

    name: str  # SpecRecord.format
    group: str  # the `--format` choice it belongs to
    markers: tuple[bytes, ...]
    parse: LineParser
    # Optional speed-ups, used only when the summary alone is wanted. Each gives the general
    # parser's result for the lines it takes and leaves every other line to that parser.
    line_fast: Callable[[PrefixParser], LineFastPath] | None = None
    block_fast: Callable[[ScanOptions, PrefixParser], BlockFastPath] | None = None
    # When set: the rank tag this regex finds right before the marker decides the line's rank,
    # and other ranks' lines are skipped before parsing (as the story's grep dropped them), so
    # they never count as malformed.
    rank_tag_before_marker: re.Pattern[bytes] | None = None


# (timestamp, rank, key) of a line a line fast path took. The key holds every value the summary
# uses, its first item the format's name, so that identical lines are counted and added once
# per block (`LineFastPath.parsed` turns it back into a parse result).
FastResult = tuple[float | None, str | None, tuple]


class LineFastPath(Protocol):
    """Matches one canonical line of its format; built per scanner (it may cache by minute).

    Why: a general interval-line parser builds a full field dict (~20 us a line, the biggest
    cost of `--format auto` after the DDTREE pass). A fast path matches the whole raw line in
    the shape real servers print with ONE compiled bytes regex and converts only the values
    the summary uses. A line in any other shape (other field order, unknown fields, ANSI codes,
    control or non-ASCII bytes, another timestamp or marker before the one found, `nan`/`…`
    values) is left to the general parser, so the summary equals the general path's (up to
    the order of float additions: identical lines are added once with their count);
    tests/test_telemetry_engines.py checks that on real and fuzzed lines."""

    def __call__(self, block: bytes, ls: int, le: int, at: int) -> FastResult | None:
        """The line `block[ls:le]`, its marker at `at`; None: the general parser reads it."""
        ...

    def parsed(self, key: tuple) -> Parsed:
        """The summary's view (the general parser's result without ts, rank and unused
        fields) of a key this fast path returned."""
        ...


class BlockFastPath(Protocol):
    """Counts a block's canonical lines of its format into a LogSummary in one pass."""

    markers: frozenset[bytes]

    def scan(self, block: bytes, summary: LogSummary) -> set[int] | None:
        """None when every line holding one of `markers` was handled here; else the starts of
        the lines handled here (the scanner parses the others generally)."""
        ...


@dataclass
class ScanOptions:
    formats: list[LineFormat]
    rank: str | None = "TP0"  # keep records of this rank (and those without a rank); None = all
    since: float | None = None  # unix seconds, inclusive
    until: float | None = None  # unix seconds, exclusive
    keep_records: bool = False
    max_line: int = DEFAULT_MAX_LINE


def count_newlines(block: bytes) -> int:
    """Lines in a block: numpy's vectorised compare counts a 512 KiB block ~3x faster than
    `bytes.count(b"\\n")`, which is a byte-at-a-time loop."""
    if len(block) < _NUMPY_COUNT_MIN:
        return block.count(b"\n")
    return int(np.count_nonzero(np.frombuffer(block, np.uint8) == 10))


def clean_bytes(raw: bytes) -> str:
    """Decode one line and drop ANSI codes and control characters (the story's sed)."""
    stripped = raw.translate(None, _CONTROL_BYTES)
    if len(stripped) != len(raw) and b"\x1b" in raw:
        stripped = _ANSI_B.sub(b"", raw).translate(None, _CONTROL_BYTES)
    return stripped.decode("utf-8", "replace")


class Scanner:
    """Feeds blocks of complete lines through the selected formats into a LogSummary (and,
    when asked, a list of SpecRecords)."""

    def __init__(self, options: ScanOptions, prefixes: PrefixParser | None = None) -> None:
        self.options = options
        self.prefixes = prefixes or PrefixParser()
        self.summary = LogSummary()
        self.records: list[SpecRecord] = []
        self.on_record: Callable[[SpecRecord], None] | None = None
        self._marked = [f for f in options.formats if f.markers]
        summary_only = not options.keep_records
        self._block_fast: list[tuple[str, BlockFastPath]] = [
            (f.name, f.block_fast(options, self.prefixes))
            for f in self._marked
            if summary_only and f.block_fast is not None
        ]
        self._unmarked = [f for f in options.formats if not f.markers]
        # Canonical lines skip the general parsers when only the summary is wanted.
        self._line_fast: dict[str, LineFastPath] = {
            f.name: f.line_fast(self.prefixes)
            for f in self._marked
            if summary_only and f.line_fast is not None
        }
        self._fast_counts: Counter[tuple] = Counter()  # fast-parsed lines, added at block end
        # Every marker is a scan key; all keys of a block are found in one pass (markers.py).
        # A line is parsed once per format even when it holds several of its markers.
        self._plan: dict[bytes, list[tuple[LineFormat, bytes]]] = {}
        for fmt in self._marked:
            for marker in fmt.markers:
                self._plan.setdefault(marker, []).append((fmt, marker))
        self._finder = MarkerFinder()
        covered = {m for _, fast in self._block_fast for m in fast.markers}
        self._keys_left_by_block_fast = [k for k in self._plan if k not in covered]

    # -- public -------------------------------------------------------------------------
    def feed(self, block: bytes, source: str = "", line_base: int = 0) -> int:
        """Scan `block` (whole lines; the last may lack its newline). Returns its line count."""
        n_lines = count_newlines(block)
        if block and not block.endswith(b"\n"):
            n_lines += 1
        self.summary.lines += n_lines
        self.summary.bytes += len(block)
        first_new = len(self.records)
        seen: dict[str, set[int]] = {}
        block_fast = self._block_fast if self.on_record is None else []
        # One marker pass for every key no block fast path covers.
        rare = self._keys_left_by_block_fast if block_fast else list(self._plan)
        hits = self._finder.find(block, rare)
        for name, fast in block_fast:
            handled = fast.scan(block, self.summary)
            if handled is not None:  # odd lines left: the general parser reads them
                seen[name] = handled
                keys = [k for k in self._plan if k in fast.markers]
                self._scan_keys(
                    keys, self._finder.find(block, keys), block, source, line_base, seen
                )
        self._scan_keys(rare, hits, block, source, line_base, seen)
        for fmt in self._unmarked:
            self._scan_all_lines(fmt, block, source, line_base)
        if self._fast_counts:
            for key, n in self._fast_counts.items():
                self.summary.add(self._line_fast[key[0]].parsed(key), n)
            self._fast_counts.clear()
        if len(self.records) > first_new:
            # Formats are scanned one after another; restore line order within the block.
            self.records[first_new:] = sorted(
                self.records[first_new:], key=lambda r: r.line_no or 0
            )
        return n_lines

    # -- internals ----------------------------------------------------------------------
    def _scan_keys(
        self,
        keys: list[bytes],
        hits: dict[bytes, list[int]] | None,
        block: bytes,
        source: str,
        line_base: int,
        seen: dict[str, set[int]],
    ) -> None:
        for key in keys:
            positions = None if hits is None else hits.get(key)
            if hits is None or positions:
                self._scan_key(key, self._plan[key], block, source, line_base, seen, positions)

    def _scan_key(
        self,
        key: bytes,
        entries: list[tuple[LineFormat, bytes]],
        block: bytes,
        source: str,
        line_base: int,
        seen: dict[str, set[int]],
        positions: list[int] | None = None,
    ) -> None:
        """Parse every line holding `key`: at the sorted `positions` when the one-pass finder
        gave them, else found here with `bytes.find`."""
        find = block.find
        rfind = block.rfind

        def next_hit(after: int) -> int:
            if positions is None:
                return find(key, after)
            i = bisect_left(positions, after)
            return positions[i] if i < len(positions) else -1

        pos = next_hit(0)
        if pos < 0:
            return
        end = len(block)
        max_line = self.options.max_line
        prefixes = self.prefixes
        handle = self._handle
        line_fast = self._line_fast if self.on_record is None else {}
        shared = len(entries) > 1 or entries[0][1] != key
        # Line numbers are counted incrementally (hits come in order), and only when needed.
        count_lines = self.options.keep_records
        last_ls, last_no = 0, line_base
        while pos >= 0:
            ls = rfind(b"\n", 0, pos) + 1
            le = find(b"\n", pos)
            if le < 0:
                le = end
            if le - ls > max_line:
                self.summary.oversized_lines += 1
                pos = next_hit(le)
                continue
            line_no = None
            if count_lines:
                last_no += block.count(b"\n", last_ls, ls)
                last_ls = ls
                line_no = last_no + 1
            for fmt, marker in entries:
                if shared:
                    at = find(marker, ls, le)
                    if at < 0:
                        continue
                else:
                    at = pos
                if len(fmt.markers) > 1:
                    done = seen.setdefault(fmt.name, set())
                    if ls in done:
                        continue
                    done.add(ls)
                tag = fmt.rank_tag_before_marker
                if (
                    tag is not None
                    and self.options.rank
                    and self._other_rank(tag, block, max(ls, at - 64), at)
                ):
                    self.summary.filtered_rank += 1
                    continue
                fast_line = line_fast.get(fmt.name)
                if fast_line is not None:
                    fast_result = fast_line(block, ls, le, at)
                    if fast_result is not None:
                        self._count_fast(*fast_result)
                        continue
                try:
                    result = fmt.parse(clean_bytes(block[ls:le]), prefixes)
                except Exception as exc:  # a parser bug must not lose the rest of the log
                    result = Malformed(fmt.name, f"parser error: {type(exc).__name__}")
                if result is not None:
                    handle(result, block, ls, le, line_no, line_base, source)
            pos = next_hit(le)

    def _count_fast(self, ts: float | None, rank: str | None, key: tuple) -> None:
        """`_handle` for a fast-parsed line: the same filters, then counted by its key."""
        s, opts = self.summary, self.options
        if opts.rank is not None and rank is not None and rank != opts.rank:
            s.filtered_rank += 1
            return
        if opts.since is not None or opts.until is not None:
            if ts is None:
                s.undated += 1
                return
            if (opts.since is not None and ts < opts.since) or (
                opts.until is not None and ts >= opts.until
            ):
                s.filtered_time += 1
                return
        self._fast_counts[key] += 1
        if ts is not None:
            if s.ts_min is None or ts < s.ts_min:
                s.ts_min = ts
            if s.ts_max is None or ts > s.ts_max:
                s.ts_max = ts

    def _other_rank(self, tag: re.Pattern[bytes], block: bytes, start: int, pos: int) -> bool:
        """A line tagged with another rank than the wanted one right before its marker (`tag`'s
        first group is the rank): skipped before parsing, like the story's grep."""
        m = tag.search(block, start, pos)
        return m is not None and m.group(1).decode() != self.options.rank

    def _scan_all_lines(self, fmt: LineFormat, block: bytes, source: str, line_base: int) -> None:
        parse, prefixes, max_line = fmt.parse, self.prefixes, self.options.max_line
        ls = 0
        for i, raw in enumerate(block.split(b"\n")):
            le = ls + len(raw)
            if raw and len(raw) <= max_line:
                try:
                    result = parse(clean_bytes(raw), prefixes)
                except Exception as exc:
                    result = Malformed(fmt.name, f"parser error: {type(exc).__name__}")
                if result is not None:
                    self._handle(result, block, ls, le, line_base + i + 1, line_base, source)
            elif len(raw) > max_line:
                self.summary.oversized_lines += 1
            ls = le + 1

    def _handle(
        self,
        result: Parsed | Malformed,
        block: bytes,
        ls: int,
        le: int,
        line_no: int | None,
        line_base: int,
        source: str,
    ) -> None:
        s = self.summary
        if isinstance(result, Malformed):
            s.malformed += 1
            if len(s.malformed_examples) < MALFORMED_EXAMPLES:
                if line_no is None:
                    line_no = line_base + block.count(b"\n", 0, ls) + 1
                s.malformed_examples.append(
                    {
                        "source": source,
                        "line_no": line_no,
                        "format": result.format,
                        "reason": result.reason,
                        "text": clean_bytes(block[ls : min(le, ls + 300)]),
                    }
                )
            return
        opts = self.options
        rank = result.get("rank")
        if opts.rank is not None and rank is not None and rank != opts.rank:
            s.filtered_rank += 1
            return
        if opts.since is not None or opts.until is not None:
            ts = result.get("ts")
            if ts is None:
                s.undated += 1
                return
            if (opts.since is not None and ts < opts.since) or (
                opts.until is not None and ts >= opts.until
            ):
                s.filtered_time += 1
                return
        rec = None
        if opts.keep_records or self.on_record is not None:
            try:
                rec = to_record(result, line_no, source)
            except Exception as exc:  # a parser returned a value the record type refuses
                s.malformed += 1
                s.warnings.append(f"{source}:{line_no}: record rejected: {type(exc).__name__}")
                return
        s.add(result)
        if rec is not None:
            if opts.keep_records:
                self.records.append(rec)
            if self.on_record is not None:
                self.on_record(rec)
