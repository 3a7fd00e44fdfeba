"""The terminal report (rich): headline, decomposition, ranked findings with evidence and next
steps. Server text is printed with markup disabled so `[red]` in a model name stays literal."""

from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from specscope.analysis.result import Analysis
from specscope.experiments.plan import Plan
from specscope.report.context import (
    ReportContext,
    breakeven_lines,
    drafted_line,
    fmt,
    fmt_ci,
    fmt_interval,
    fmt_ms,
    fmt_value,
    plan_precision_line,
    precision_line,
)
from specscope.report.serving import (
    LEVEL_HEADER,
    TABLE_HEADER,
    latency_rows,
    level_rows,
    summary_lines,
)


def render_terminal(ctx: ReportContext, console: Console) -> None:
    """The diagnosis: the headline panel, a partial run's warning, serving metrics, the ranked
    findings, notes and the first failed request."""
    a = ctx.analysis
    console.print(_headline_panel(ctx))
    if ctx.partial:
        console.print(
            Text(
                f"PARTIAL RUN — {ctx.status_line}. Numbers cover only what was measured.",
                style="bold yellow",
            )
        )

    if a.serving:
        render_serving(a.serving, console)
    _render_findings(a, console)
    shown = _loops_note(a)  # in the panel already, beside the commit length
    for n in a.notes:
        if n != shown:
            console.print(Text(f"note: {n}", style="dim"))
    if ctx.errors:
        console.print(
            Text(
                f"{len(ctx.errors)} request(s) failed; first: {ctx.errors[0].kind}: "
                f"{ctx.errors[0].message}",
                style="red",
            )
        )


def _loops_note(a: Analysis) -> str | None:
    """The headline's word on repetition loops when they dominate its commit length."""
    loops = a.headline_loops or {}
    return loops.get("note") if loops.get("dominant") else None


def _headline_panel(ctx: ReportContext) -> Panel:
    """The figures in one panel: rate, TTFT, commit length, step time and their intervals, the
    decomposition, the baseline split and breakeven, precision, requests."""
    a, info = ctx.analysis, ctx.info
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    _row = head.add_row

    def add_row(key: str, value: str) -> None:
        _row(key, Text(value))  # Text: values may hold server strings, never markup

    add_row("decode tokens/s", fmt(a.decode_tps, 1) + fmt_ci(a.decode_tps_ci, 1))
    add_row("time to first token", fmt(a.ttft_s, 3, "s") + fmt_ci(a.ttft_s_ci, 3, unit="s"))
    add_row(
        "mean commit length",
        f"{fmt(a.mean_commit_len, 2)} tokens/step"
        + fmt_ci(a.mean_commit_len_ci, 2)
        + (f"  (from {a.commit_len_source})" if a.commit_len_source else ""),
    )
    if (loops := _loops_note(a)) is not None:
        _row(Text("loops dominate", style="bold yellow"), Text(loops))
    if (drafted := drafted_line(a)) is not None:
        add_row("per drafted step", drafted)
    add_row("mean step time", fmt_ms(a.mean_step_s) + fmt_ci(a.mean_step_s_ci, 1, 1e3, "ms"))
    if a.speculation:
        add_row("speculation", f"{a.speculation}: {a.speculation_reason}")
    if a.mean_commit_len and a.mean_step_s:
        add_row(
            "decomposition",
            f"{fmt(a.mean_commit_len, 2)} / {fmt_ms(a.mean_step_s)} = "
            f"{fmt(a.mean_commit_len / a.mean_step_s, 1)} tokens/s",
        )
    at = a.attribution
    if at is not None:
        add_row(
            "vs baseline",
            f"tps ratio {fmt(at.tps_ratio, 2)} = acceptance "
            f"{fmt(at.acceptance_factor, 2)} × step time {fmt(at.step_time_factor, 2)}",
        )
        if at.tps_ratio_ci is not None:
            add_row(
                "95% intervals",
                f"tps ratio{fmt_interval(at.tps_ratio_ci, 2)}, acceptance"
                f"{fmt_interval(at.acceptance_factor_ci, 2)}, step time"
                f"{fmt_interval(at.step_time_factor_ci, 2)}",
            )
    for label, text in breakeven_lines(a.breakeven):
        add_row(label, text)
    if a.interval_method:
        add_row("intervals", a.interval_method)
    if (reached := precision_line(a.precision)) is not None:
        add_row("precision", reached)
    add_row("requests (errors)", f"{a.requests} ({a.errors})")
    title = Text(f"specscope diagnosis: {info.model or info.endpoint}", style="bold")
    return Panel(head, title=title, expand=False)


def _render_findings(a: Analysis, console: Console) -> None:
    """The findings ranked, each with its evidence and next step (or why there is none)."""
    if not a.findings:
        console.print(Text(f"No finding: {a.no_finding_reason or ''}"))
    for rank, f in enumerate(a.findings, start=1):
        lines = [
            Text.assemble(
                (f"{rank}. {f.id}", "bold cyan"),
                f"  confidence {fmt(f.confidence, 2)}",
                (f"  factor {fmt(f.factor, 2)}" if f.factor is not None else ""),
            ),
            Text(f.summary),
        ]
        for e in f.evidence:
            lines.append(
                Text(f"   • {e.label}: {fmt_value(e.value)} {e.unit}  [{e.source}]", style="dim")
            )
        if f.next:
            lines.append(Text.assemble(("   next: ", "bold green"), f.next))
        console.print(Group(*lines))


def render_serving(serving: dict, console: Console) -> None:
    """The serving table: latency percentiles with the mean's interval, throughput, goodput, and
    a row per concurrency level when there are several."""
    rows = latency_rows(serving.get("run") or {})
    if rows:
        t = Table(
            title=Text("Serving metrics"), title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1)
        )
        for i, h in enumerate(TABLE_HEADER):
            t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
        for r in rows:
            t.add_row(*r)
        console.print(t)
    for line in summary_lines(serving):
        console.print(Text(line))
    levels = level_rows(serving)
    if len(levels) > 1:
        t = Table(
            title=Text("By concurrency"), title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1)
        )
        for h in LEVEL_HEADER:
            t.add_column(h, justify="right")
        for r in levels:
            t.add_row(*r)
        console.print(t)


def render_plan(plan: Plan, console: Console, target: str) -> None:
    """What will be sent, before anything is: steps, token counts, estimated time. Steps of one
    tag (two-point's alternating rounds) are shown as one row."""
    t = Table(
        title=Text(f"Plan for {target}"), title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1)
    )
    t.add_column("experiment", no_wrap=True)
    t.add_column("prompt", justify="right")
    t.add_column("gen", justify="right")
    t.add_column("req", justify="right")
    t.add_column("est s", justify="right")
    t.add_column("why", overflow="fold")
    d, p = plan.decode_tps_assumed, plan.prefill_tps_assumed
    rows: dict[str, list] = {}
    for s in plan.steps:
        row = rows.setdefault(s.tag, [s, 0, 0.0])
        row[1] += s.requests
        row[2] += s.estimate_s(d, p)
    for tag, (s, n, est) in rows.items():
        t.add_row(
            tag, str(s.prompt_tokens), str(s.max_tokens), str(n), f"{est:.1f}", Text(s.purpose)
        )
    console.print(t)
    basis = (
        "measured over a 32-token calibration request: if the server slows down over long "
        "generations, as in the seed story, it takes longer"
        if plan.rates_measured
        else "assumed; nothing measured yet"
    )
    console.print(
        Text(
            f"{plan.total_requests} requests, {plan.total_prompt_tokens} prompt + "
            f"{plan.total_generated_tokens} generated tokens: about {plan.estimate_s():.0f} s "
            f"if {d:.1f} tok/s holds ({basis})."
        )
    )
    if plan.precision is not None:
        console.print(Text(plan_precision_line(plan.precision.to_dict())))
    for k in plan.skipped:
        console.print(
            Text(
                f"skipped {k.experiment}{':' + k.point if k.point else ''}: {k.reason}",
                style="yellow",
            )
        )
    for n in plan.notes:
        console.print(Text(f"note: {n}", style="dim"))
