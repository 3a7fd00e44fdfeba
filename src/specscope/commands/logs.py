"""`specscope logs PATH...|-`: read what a server logged about speculation.

Like the story's `grep "TP0\\].*DDTREE metrics" | grep -oE ... | sort | uniq -c`, for every
common engine's format: prints the commit-length histogram (a table with bars) and per-format
summaries, or with `--json` one object with the ARCHITECTURE §8 keys (`records`, `malformed`,
`formats`, `commit_len_histogram`, `mean_commit_len`) plus details.

Exit codes: 0 ok (also when nothing matched: that is an answer); 2 bad usage or unreadable input
(missing file, bad --since/--pattern, a --logs-cmd that cannot run or printed nothing).
"""

from __future__ import annotations

from typing import Annotated

import typer

from specscope.commands.common import fail_usage, out_console, print_json, warn
from specscope.report.logs_terminal import render_logs
from specscope.telemetry.custom import PatternError
from specscope.telemetry.ingest import LogQuery, UnknownFormatError, read_logs, selected_formats
from specscope.telemetry.parallel import usable_cpus
from specscope.telemetry.sources import DEFAULT_COMMAND_TIMEOUT_S, SourceError
from specscope.telemetry.timewindow import TimeFormatError, parse_user_time


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
    render_logs(summary, verbose, out_console)
