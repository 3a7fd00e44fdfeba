"""A Markdown report: the same content as the HTML minus the plots, for issues and PRs.

Server-provided text is put in code spans or has Markdown/HTML metacharacters escaped, so a model
name cannot inject markup into a rendered issue."""

from __future__ import annotations

import re
from pathlib import Path

from specscope.analysis.result import Analysis, Attribution
from specscope.report.context import (
    ReportContext,
    breakeven_lines,
    drafted_line,
    finding_heading,
    finding_numbers,
    fmt,
    fmt_ci,
    fmt_interval,
    fmt_ms,
    fmt_value,
    folded_next,
    precision_line,
    test_of,
    verdict_lines,
)
from specscope.report.serving import (
    LEVEL_HEADER,
    TABLE_HEADER,
    latency_rows,
    level_rows,
    summary_lines,
)

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|<>&])")


def md_escape(value: object) -> str:
    text = "" if value is None else str(value)
    return _MD_SPECIAL.sub(r"\\\1", text.replace("\n", " "))


def render_markdown(ctx: ReportContext) -> str:
    """Title and status, the verdict, the headline, the baseline split, serving metrics,
    breakeven, the findings (each folded to the numbers that carry it, its evidence and test in
    a <details>), then notes, skipped experiments and failed requests."""
    a = ctx.analysis
    out = _title(ctx) + _verdict(a) + _headline(a)
    if a.attribution is not None:
        out += _attribution(a.attribution)
    if a.serving:
        out += _serving(a.serving)
    if rows := breakeven_lines(a.breakeven):
        out += ["## Breakeven", "", *[f"- {label}: {md_escape(text)}" for label, text in rows], ""]
    out += _findings(a)
    return "\n".join(out + _appendix(ctx))


def _title(ctx: ReportContext) -> list[str]:
    """The title (model or endpoint), the run's id, endpoint and status, and a partial run's
    warning."""
    info = ctx.info
    out: list[str] = [
        f"# specscope diagnosis — {md_escape(info.model or info.endpoint or info.run_id)}",
        "",
    ]
    out.append(
        f"run {md_escape(info.run_id)} · endpoint {md_escape(info.endpoint)} · "
        f"status {md_escape(info.status)}"
    )
    out.append("")
    if ctx.partial:
        out += [
            f"> **Partial run.** {md_escape(ctx.status_line)}. Numbers cover only what was "
            "measured before it stopped.",
            "",
        ]
    return out


def _verdict(a: Analysis) -> list[str]:
    """The verdict's sentences, first: the rate, what moved, the cause, the next step."""
    lines = verdict_lines(a)
    return ["## Verdict", "", *[f"- {md_escape(s)}" for s in lines], ""] if lines else []


def _headline(a: Analysis) -> list[str]:
    """The headline table, its interval method, precision reached and the decomposition."""
    out = [
        "## Headline",
        "",
        "| metric | value |",
        "|---|---|",
        f"| decode tokens/s | {fmt(a.decode_tps, 1)}{fmt_ci(a.decode_tps_ci, 1)} |",
        f"| time to first token | {fmt(a.ttft_s, 3, 's')}{fmt_ci(a.ttft_s_ci, 3, unit='s')} |",
        f"| mean commit length | {fmt(a.mean_commit_len, 2)}{fmt_ci(a.mean_commit_len_ci, 2)} |",
        *([f"| per drafted step | {md_escape(d)} |"] if (d := drafted_line(a)) else []),
        f"| mean step time | {fmt_ms(a.mean_step_s)}{fmt_ci(a.mean_step_s_ci, 1, 1e3, 'ms')} |",
        *(
            [f"| speculation | {md_escape(a.speculation)}: {md_escape(a.speculation_reason)} |"]
            if a.speculation
            else []
        ),
        f"| requests (errors) | {a.requests} ({a.errors}) |",
        "",
    ]
    if (reached := precision_line(a.precision)) is not None:
        out += [f"Precision: {md_escape(reached)}.", ""]
    if a.mean_commit_len and a.mean_step_s:
        out += [
            f"decode_tps = {fmt(a.mean_commit_len, 2)} tokens/step / {fmt_ms(a.mean_step_s)} "
            f"= {fmt(a.mean_commit_len / a.mean_step_s, 1)} tokens/s",
            "",
        ]
    if a.interval_method:
        out += _details("How the intervals were obtained", [md_escape(a.interval_method)])
    return out


def _details(summary: str, lines: list[str]) -> list[str]:
    """A folded block (GitHub renders <details>): the statistics a reader opens on demand."""
    return ["<details>", f"<summary>{summary}</summary>", "", *lines, "", "</details>", ""]


def _attribution(at: Attribution) -> list[str]:
    """The baseline split: tps ratio = acceptance factor × step-time factor, and intervals."""
    out = [
        "## Attribution",
        "",
        f"baseline {md_escape(at.baseline_run or '-')}: tps ratio "
        f"{fmt(at.tps_ratio, 3)} = acceptance factor {fmt(at.acceptance_factor, 3)} × "
        f"step-time factor {fmt(at.step_time_factor, 3)}",
        "",
    ]
    if at.tps_ratio_ci is not None:
        out += [
            f"95% intervals: tps ratio{fmt_interval(at.tps_ratio_ci)}, acceptance factor"
            f"{fmt_interval(at.acceptance_factor_ci)}, step-time factor"
            f"{fmt_interval(at.step_time_factor_ci)}",
            "",
        ]
    return out


def _findings(a: Analysis) -> list[str]:
    """The findings ranked, each with its factor and cause, the numbers that carry it and its
    next step; its every evidence line and test folded in a <details> (or why there is none)."""
    out = ["## Findings", ""]
    if not a.findings:
        out += [f"No finding: {md_escape(a.no_finding_reason or '')}", ""]
    for rank, f in enumerate(a.findings, start=1):
        heading = finding_heading(f)
        out.append(
            f"{rank}. **{f.id}**{' (' + md_escape(heading) + ')' if heading else ''}: "
            f"{md_escape(f.summary)}"
        )
        if numbers := finding_numbers(f, test_of(a, f.id)):
            out.append(f"   - {md_escape(' · '.join(numbers))}")
        out.append(f"   - next: {md_escape(folded_next(f))}")
        out.append("")
        out += _details(
            f"{f.id}: evidence and test (confidence {fmt(f.confidence, 2)})",
            [
                f"- {md_escape(e.label)}: {md_escape(fmt_value(e.value))} {md_escape(e.unit)} "
                f"({md_escape(e.source)})"
                for e in f.evidence
            ]
            + ([f"- next (all of it): {md_escape(f.next)}"] if f.next else []),
        )
    out.append("")
    return out


def _appendix(ctx: ReportContext) -> list[str]:
    """Notes (the analysis', then the run's), skipped experiments, the first 50 failed
    requests."""
    a, info = ctx.analysis, ctx.info
    out: list[str] = []
    if a.notes or info.notes:
        notes = [f"- {md_escape(n)}" for n in [*a.notes, *info.notes]]
        out += ["## Notes", "", *_details("Claims tested and not reported, and notes", notes)]
    if ctx.plan and ctx.plan.get("skipped"):
        out += (
            ["## Skipped", ""]
            + [
                f"- {md_escape(s.get('tag'))}: {md_escape(s.get('reason'))}"
                for s in ctx.plan["skipped"]
            ]
            + [""]
        )
    if ctx.errors:
        out += (
            ["## Errors", ""]
            + [
                f"- request {e.index} ({md_escape(e.tag)}): {md_escape(e.kind)}: "
                f"{md_escape(e.message)}"
                for e in ctx.errors[:50]
            ]
            + [""]
        )
    return out


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    return (
        ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        + ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows]
        + [""]
    )


def _serving(serving: dict) -> list[str]:
    out = ["## Serving metrics", ""]
    rows = latency_rows(serving.get("run") or {})
    if rows:
        out += _table(TABLE_HEADER, rows)
    out += [f"- {md_escape(line)}" for line in summary_lines(serving)] + [""]
    levels = level_rows(serving)
    if len(levels) > 1:
        out += _table(LEVEL_HEADER, levels)
    return out


def write_markdown(ctx: ReportContext, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(ctx), encoding="utf-8")
    return path
