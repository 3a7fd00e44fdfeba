"""Scan one large plain file with several processes, each over a byte range cut at line ends.

Why: the scan is CPU-bound C searches over bytes; a second core halves a big journal's time.
Only for summaries (records would have to travel back between processes) of regular,
uncompressed files; everything else reads sequentially.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from specscope.telemetry.prefix import PrefixParser
from specscope.telemetry.scan import LineFormat, Scanner, ScanOptions
from specscope.telemetry.sources import SourceLog, file_range_chunks, whole_lines
from specscope.telemetry.summary import LogSummary, merge_summaries

MIN_PARALLEL_BYTES = 64 << 20
# The formats of a (`--format`, `--pattern`) selection; a module-level function, so that it
# travels to a worker process by name.
FormatsOf = Callable[[str, "str | None"], list[LineFormat]]
_GZIP_MAGIC = b"\x1f\x8b"


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, cpus or 1)


def default_jobs() -> int:
    """Usable CPUs, at most 4 (the scan is memory-bound beyond that)."""
    return min(4, usable_cpus())


def capped_jobs(asked: int) -> int:
    """`asked` processes (0: the default), never more than the usable CPUs: one process per
    CPU is all the scan can use, and each one more costs memory for nothing."""
    return default_jobs() if asked == 0 else max(1, min(asked, usable_cpus()))


def parallel_eligible(path: str, jobs: int) -> bool:
    """A regular, uncompressed file big enough to be worth the processes."""
    if jobs < 2:
        return False
    try:
        if not os.path.isfile(path) or os.path.getsize(path) < MIN_PARALLEL_BYTES:
            return False
        with open(path, "rb") as f:
            return not f.read(2).startswith(_GZIP_MAGIC)
    except OSError:
        return False


def _cut_points(path: str, parts: int, max_line: int) -> list[int]:
    """Range starts at line starts: each cut moves past the next newline, looking at most
    `max_line` bytes ahead (a file of zeros or one endless line has none: then the cut stays
    there, inside a line too long to be kept anyway), so memory stays bounded."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as f:
        for i in range(1, parts):
            f.seek(size * i // parts)
            f.readline(max_line)  # move to the start of the next line, reading a bounded amount
            cuts.append(min(size, max(f.tell(), cuts[-1])))
    cuts.append(size)
    return cuts


def _scan_range(
    path: str,
    start: int,
    end: int,
    selection: tuple[str, str | None],
    formats_of: FormatsOf,
    options: ScanOptions,
    now: float,
    block_size: int,
) -> LogSummary:
    options.formats = formats_of(*selection)  # rebuilt here: a --pattern's parser is a closure
    scanner = Scanner(options, PrefixParser(now=now))
    log = SourceLog()

    line_base = 0
    for block in whole_lines(
        file_range_chunks(path, start, end, block_size), options.max_line, log
    ):
        line_base += scanner.feed(block, path, line_base)
    scanner.summary.oversized_lines += log.oversized_lines
    scanner.summary.warnings.extend(log.warnings)
    return scanner.summary


def scan_file_parallel(
    path: str,
    selection: tuple[str, str | None],
    formats_of: FormatsOf,
    options: ScanOptions,
    jobs: int,
    block_size: int,
    now: float,
) -> LogSummary:
    """Summary of `path` scanned by `jobs` processes (fork where available: no re-import)."""
    cuts = _cut_points(path, jobs, options.max_line)
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    ranges = [(a, b) for a, b in itertools.pairwise(cuts) if b > a]

    def scan_here(start: int, end: int) -> LogSummary:
        return _scan_range(
            path, start, end, selection, formats_of, replace(options, formats=[]), now, block_size
        )

    if len(ranges) < 2:
        return merge_summaries([scan_here(a, b) for a, b in ranges], consecutive=True)
    portable = replace(options, formats=[])
    # The first range is scanned in this process, which would otherwise only wait: one fork
    # and one result's trip back less, ~1-2% of a 200 MB scan.
    with ProcessPoolExecutor(max_workers=len(ranges) - 1, mp_context=ctx) as pool:
        futures = [
            pool.submit(_scan_range, path, a, b, selection, formats_of, portable, now, block_size)
            for a, b in ranges[1:]
        ]
        parts = [scan_here(*ranges[0]), *(f.result() for f in futures)]
    return merge_summaries(parts, consecutive=True)
