"""`specscope logs`' terminal view: the commit-length histogram with bars (the story's
`uniq -c`, readable), the mean, odd pairs, and per-format summaries."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from specscope.report.text import untrusted
from specscope.telemetry.summary import LogSummary, commit_key

BAR_WIDTH = 40


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_logs(summary: LogSummary, verbose: bool, console: Console) -> None:
    """The terminal view: the story's `uniq -c`, readable."""
    mean, basis = summary.mean_commit_len()
    console.print(
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
        console.print(table)
        console.print(f"mean commit length {mean:.2f} over {total} steps ({basis})")
        odd = [
            r
            for r in summary.pairs_table()
            if r["accepted_drafts"] is not None
            and abs(r["commit_len"] - r["accepted_drafts"] - 1) > 1e-9
        ]
        for r in odd:
            console.print(
                f"[yellow]note:[/] {r['count']} step(s) with accepted_drafts="
                f"{r['accepted_drafts']:.2f} but commit_len={r['commit_len']:.2f} (expected +1)",
                highlight=False,
            )
    elif mean is not None:
        console.print(f"mean commit length {mean:.2f} ({basis}; no per-step records)")
    drafted = summary.commit.figures().per_drafted_step
    if drafted is not None:
        console.print(
            f"mean commit length per drafted step {drafted:.2f} (the server counts only steps "
            "that drafted something; steps that drafted nothing commit one token and are missing)",
            highlight=False,
        )
    elif mean is None and not hist:
        console.print("no speculative-decoding records found")
    _render_formats(summary, console)
    if verbose and summary.malformed_examples:
        console.print(f"first {len(summary.malformed_examples)} malformed lines:")
        for ex in summary.malformed_examples:
            console.print(
                untrusted(
                    f"  {ex['source']}:{ex['line_no']} [{ex['format']}] {ex['reason']}: "
                    f"{ex['text']}"
                ),
                highlight=False,
            )
    elif summary.malformed:
        console.print("(use --verbose to see the first malformed lines)")


def _render_formats(summary: LogSummary, console: Console) -> None:
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
    console.print(table)
    if "sglang_decode" in summary.by_format:
        console.print(
            "note: SGLang's `accept rate` formula changed in PR #23530 (2026-04); older builds "
            "overstate it",
            highlight=False,
        )
