"""One call from inputs to a summary: the code path `specscope logs` and `diagnose` share, and
the registry of line formats with the `--format` groups that select them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from specscope.telemetry.custom import PatternError, compile_pattern, custom_format
from specscope.telemetry.ddtree import AVG_COMMIT, DDTREE
from specscope.telemetry.llamacpp import LLAMACPP_LOG, LLAMACPP_TIMINGS
from specscope.telemetry.parallel import capped_jobs, parallel_eligible, scan_file_parallel
from specscope.telemetry.prefix import PrefixParser, clean_line
from specscope.telemetry.records import Malformed, SpecRecord, to_record
from specscope.telemetry.scan import DEFAULT_MAX_LINE, LineFormat, Scanner, ScanOptions
from specscope.telemetry.sglang import SGLANG_DECODE
from specscope.telemetry.sources import (
    BLOCK_SIZE,
    DEFAULT_COMMAND_TIMEOUT_S,
    SourceLog,
    command_chunks,
    file_chunks,
    stdin_chunks,
    whole_lines,
)
from specscope.telemetry.summary import LogSummary, merge_summaries
from specscope.telemetry.vllm import VLLM_SPEC

LINE_FORMATS: tuple[LineFormat, ...] = (
    DDTREE,
    SGLANG_DECODE,
    VLLM_SPEC,
    LLAMACPP_LOG,
    LLAMACPP_TIMINGS,
    AVG_COMMIT,
)
FORMAT_GROUPS = ("auto", "sglang", "vllm", "llamacpp", "ddtree", "custom")


class UnknownFormatError(ValueError):
    pass


def formats_for(group: str) -> list[LineFormat]:
    """The formats that `--format GROUP` reads (`auto`: all of them; `custom`: none, only
    the user's `--pattern`)."""
    if group not in FORMAT_GROUPS:
        raise UnknownFormatError(
            f"--format must be one of {', '.join(FORMAT_GROUPS)}, not {group!r}"
        )
    if group == "auto":
        return list(LINE_FORMATS)
    return [f for f in LINE_FORMATS if f.group == group]


@dataclass
class LogQuery:
    """What to read and which records to keep (mirrors the `specscope logs` flags)."""

    paths: list[str] = field(default_factory=list)  # files, or "-" for stdin
    logs_cmd: str | None = None
    command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S
    format: str = "auto"
    pattern: str | None = None
    rank: str | None = "TP0"  # None = all ranks
    since: float | None = None
    until: float | None = None
    keep_records: bool = False
    max_line: int = DEFAULT_MAX_LINE
    block_size: int = BLOCK_SIZE
    # Processes for one big plain file (>= 64 MiB). 1 by default: on a shared, loaded machine a
    # second process measured slower; pass 0 for "usable CPUs, max 4".
    jobs: int = 1


@dataclass
class LogResult:
    summary: LogSummary
    records: list[SpecRecord]


def selected_formats(format_: str, pattern: str | None) -> list[LineFormat]:
    """The formats a query reads; raises UnknownFormatError / PatternError on bad flags."""
    formats = [] if format_ == "custom" else formats_for(format_)
    if pattern is not None:
        formats.insert(0, custom_format(compile_pattern(pattern)))
    elif format_ == "custom":
        raise PatternError("--format custom needs --pattern REGEX")
    return formats


def _sources(query: LogQuery, log: SourceLog) -> Iterator[tuple[str, Iterable[bytes]]]:
    for path in query.paths:
        if path == "-":
            yield "-", stdin_chunks(log, query.block_size)
        else:
            yield path, file_chunks(path, log, query.block_size)
    if query.logs_cmd:
        yield query.logs_cmd, command_chunks(query.logs_cmd, log, query.command_timeout_s)


def read_logs(query: LogQuery, prefixes: PrefixParser | None = None) -> LogResult:
    """Read every source of `query` and return its summary (and records if asked).
    Raises SourceError for unreadable input; warnings land in `summary.warnings`."""
    options = ScanOptions(
        formats=selected_formats(query.format, query.pattern),
        rank=query.rank,
        since=query.since,
        until=query.until,
        keep_records=query.keep_records,
        max_line=query.max_line,
    )
    prefixes = prefixes or PrefixParser()
    scanner = Scanner(options, prefixes)
    jobs = capped_jobs(query.jobs) if query.jobs is not None else 1
    parts = [scanner.summary]
    log = SourceLog()
    for name, chunks in _sources(query, log):
        if (
            not query.keep_records
            and name != "-"
            and name != query.logs_cmd
            and parallel_eligible(name, jobs)
        ):
            parts.append(
                scan_file_parallel(
                    name,
                    (query.format, query.pattern),
                    selected_formats,
                    options,
                    jobs,
                    query.block_size,
                    prefixes.now,
                )
            )
            continue
        line_base = 0
        for block in whole_lines(chunks, query.max_line, log):
            line_base += scanner.feed(block, name, line_base)
    summary = parts[0] if len(parts) == 1 else merge_summaries(parts)
    summary.warnings.extend(log.warnings)
    summary.oversized_lines += log.oversized_lines
    return LogResult(summary, scanner.records)


def parse_text(
    text: str,
    format_: str = "auto",
    rank: str | None = None,
    pattern: str | None = None,
    source: str = "",
) -> LogResult:
    """Parse log text held in memory (all ranks by default): for tests, the twin's log, and
    callers that already have the lines."""
    scanner = Scanner(
        ScanOptions(formats=selected_formats(format_, pattern), rank=rank, keep_records=True)
    )
    data = text.encode("utf-8", "replace")
    if data:
        scanner.feed(data, source)
    return LogResult(scanner.summary, scanner.records)


def parse_line(
    line: str, format_: str = "auto", pattern: str | None = None, source: str = ""
) -> SpecRecord | Malformed | None:
    """One line -> its record (first format that recognises it), a Malformed, or None."""
    prefixes = PrefixParser()
    cleaned = clean_line(line.rstrip("\n"))
    malformed: Malformed | None = None
    for fmt in selected_formats(format_, pattern):
        if fmt.markers and not any(m.decode() in cleaned for m in fmt.markers):
            continue
        result = fmt.parse(cleaned, prefixes)
        if isinstance(result, Malformed):
            malformed = malformed or result
        elif result is not None:
            return to_record(result, None, source)
    return malformed
