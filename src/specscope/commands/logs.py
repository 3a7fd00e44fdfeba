"""`specscope logs PATH...|-`: read what a server logged about speculation.

Like the story's `grep "TP0\\].*DDTREE metrics" | grep -oE ... | sort | uniq -c`, for every
common engine's format: prints the commit-length histogram (a table with bars) and per-format
summaries, or with `--json` one object with the ARCHITECTURE §8 keys (`records`, `malformed`,
`formats`, `commit_len_histogram`, `mean_commit_len`) plus details.

Exit codes: 0 ok (also when nothing matched: that is an answer); 2 bad usage or unreadable input
(missing file, bad --since/--pattern, a --logs-cmd that cannot run or printed nothing).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from specscope.commands.common import fail_usage, out_console, print_json, untrusted, warn
from specscope.telemetry.custom import PatternError
from specscope.telemetry.ingest import LogQuery, UnknownFormatError, read_logs, selected_formats
from specscope.telemetry.parallel import usable_cpus
from specscope.telemetry.sources import DEFAULT_COMMAND_TIMEOUT_S, SourceError
from specscope.telemetry.summary import LogSummary, commit_key
from specscope.telemetry.timewindow import TimeFormatError, parse_user_time

BAR_WIDTH = 40


def logs(
    paths: Annotated[
        list[str] | None, typer.Argument(help="Log files (.gz ok) or - for stdin")
    ] = None,
    format_: Annotated[
        str, typer.Option("--format", help="auto|sglang|vllm|llamacpp|ddtree|custom")
    ] = "auto",
    since: Annotated[
        str | None, typer.Option(help="Only records at or after T (ISO, HH:MM:SS, -60s, -5m)")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Only records before T")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    pattern: Annotated[
        str | None,
        typer.Option(
            help="Regex with named groups (commit_len, accepted_drafts, accept_rate, ts, rank, "
            "request_id, step, n_steps) for in-house formats"
        ),
    ] = None,
    rank: Annotated[
        str, typer.Option(help="Rank to keep (lines without a rank are always kept), or 'all'")
    ] = "TP0",
    logs_cmd: Annotated[
        str | None,
        typer.Option(
            "--logs-cmd",
            help='Read the stdout of a command (no shell), e.g. "journalctl -u X --since -60s"',
        ),
    ] = None,
    cmd_timeout: Annotated[
        float, typer.Option("--cmd-timeout", help="Seconds before --logs-cmd is killed")
    ] = DEFAULT_COMMAND_TIMEOUT_S,
    jobs: Annotated[
        int,
        typer.Option(
            help="Processes for a plain file over 64 MB (0 = usable CPUs, max 4; 1 = one process)"
        ),
    ] = 0,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show the first malformed lines")
    ] = False,
) -> None:
    paths = paths or []
    if not paths and not logs_cmd:
        fail_usage('logs needs a PATH, - for stdin, or --logs-cmd "CMD"')
    if cmd_timeout <= 0:
        fail_usage("--cmd-timeout must be > 0")
    if jobs < 0:
        fail_usage("--jobs must be >= 0")
    if jobs > usable_cpus():
        warn(f"--jobs {jobs}: using {usable_cpus()}, the CPUs this process may run on")
    try:
        selected_formats(format_, pattern)
        t_since = parse_user_time(since) if since else None
        t_until = parse_user_time(until) if until else None
    except (UnknownFormatError, PatternError, TimeFormatError) as exc:
        fail_usage(str(exc))
    if t_since is not None and t_until is not None and t_until <= t_since:
        fail_usage(f"--until ({until}) is not after --since ({since})")
    query = LogQuery(
        paths=paths,
        logs_cmd=logs_cmd,
        command_timeout_s=cmd_timeout,
        format=format_,
        pattern=pattern,
        rank=None if rank.lower() == "all" else rank,
        since=t_since,
        until=t_until,
        jobs=jobs,
    )
    try:
        result = read_logs(query)
    except SourceError as exc:
        fail_usage(str(exc))
    summary = result.summary
    for warning in summary.warnings:
        warn(warning)
    if json_:
        print_json(summary.to_json())
        return
    render(summary, verbose)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(summary: LogSummary, verbose: bool) -> None:
    """The terminal view: the story's `uniq -c`, readable."""
    mean, basis = summary.mean_commit_len()
    out_console.print(
        f"{summary.records} records from {summary.bytes / 1e6:.1f} MB, "
        f"{summary.malformed} malformed, "
        f"{summary.filtered_rank} of other ranks, {summary.filtered_time} outside the window",
        highlight=False,
    )
    hist = summary.commit_len_histogram()
    if hist:
        total = sum(hist.values())
        peak = max(hist.values())
        table = Table(title="Commit length per verify step (accepted drafts + 1)")
        table.add_column("commit len", justify="right")
        table.add_column("steps", justify="right")
        table.add_column("share", justify="right")
        table.add_column("", no_wrap=True)
        for key, n in hist.items():
            bar = "█" * max(1, round(BAR_WIDTH * n / peak))
            table.add_row(key, str(n), f"{100 * n / total:.1f}%", f"[cyan]{bar}[/]")
        out_console.print(table)
        out_console.print(f"mean commit length {mean:.2f} over {total} steps ({basis})")
        odd = [
            r
            for r in summary.pairs_table()
            if r["accepted_drafts"] is not None
            and abs(r["commit_len"] - r["accepted_drafts"] - 1) > 1e-9
        ]
        for r in odd:
            out_console.print(
                f"[yellow]note:[/] {r['count']} step(s) with accepted_drafts="
                f"{r['accepted_drafts']:.2f} but commit_len={r['commit_len']:.2f} (expected +1)",
                highlight=False,
            )
    elif mean is not None:
        out_console.print(f"mean commit length {mean:.2f} ({basis}; no per-step records)")
    drafted = summary.commit.figures().per_drafted_step
    if drafted is not None:
        out_console.print(
            f"mean commit length per drafted step {drafted:.2f} (the server counts only steps "
            "that drafted something; steps that drafted nothing commit one token and are missing)",
            highlight=False,
        )
    elif mean is None and not hist:
        out_console.print("no speculative-decoding records found")
    _render_formats(summary)
    if verbose and summary.malformed_examples:
        out_console.print(f"first {len(summary.malformed_examples)} malformed lines:")
        for ex in summary.malformed_examples:
            out_console.print(
                untrusted(
                    f"  {ex['source']}:{ex['line_no']} [{ex['format']}] {ex['reason']}: "
                    f"{ex['text']}"
                ),
                highlight=False,
            )
    elif summary.malformed:
        out_console.print("(use --verbose to see the first malformed lines)")


def _render_formats(summary: LogSummary) -> None:
    if not summary.by_format:
        return
    table = Table(title="Per format")
    for col in ("format", "records", "mean commit len", "min..max", "mean accept rate", "other"):
        table.add_column(col, justify="right" if col != "format" else "left")
    for name, stats in sorted(summary.by_format.items()):
        j: dict[str, Any] = stats.to_json()
        other = []
        if "mean_per_position" in j:
            other.append("per-position " + ", ".join(f"{p:.2f}" for p in j["mean_per_position"]))
        if "mean_gen_throughput" in j:
            other.append(f"gen {j['mean_gen_throughput']:.1f} tok/s")
        rng = (
            f"{commit_key(j['min_commit_len'])}..{commit_key(j['max_commit_len'])}"
            if j["min_commit_len"] is not None
            else "-"
        )
        table.add_row(
            name,
            str(j["records"]),
            _fmt(j.get("step_weighted_commit_len", j["mean_commit_len"])),
            rng,
            _fmt(j["mean_accept_rate"], 3),
            "; ".join(other),
        )
    out_console.print(table)
    if "sglang_decode" in summary.by_format:
        out_console.print(
            "note: SGLang's `accept rate` formula changed in PR #23530 (2026-04); older builds "
            "overstate it",
            highlight=False,
        )
