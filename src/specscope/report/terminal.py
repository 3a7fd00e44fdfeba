"""The terminal report (rich): the verdict, the figures, the ranked findings folded to the
numbers that carry them (`verbose`: every evidence line, test and note). Server text is printed
as rich `Text` (markup off) so `[red]` in a model name stays literal."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from specscope.analysis.result import Analysis
from specscope.experiments.plan import FINISH_S, Plan
from specscope.report.context import (
    FOLDED_HINT,
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
    plan_precision_line,
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


def render_terminal(ctx: ReportContext, console: Console, verbose: bool = False) -> None:
    """The diagnosis: the verdict first, the figures' panel, serving metrics, the findings and
    the first failed request. By default each finding shows its sentence, its factor, the few
    numbers that carry it and its next step; `verbose` adds every evidence line, the tests
    (method, p, q), the notes and the interval method (today's JSON holds them all)."""
    a = ctx.analysis
    _render_verdict(ctx, console)
    console.print(_headline_panel(ctx, verbose))
    if a.serving:
        render_serving(a.serving, console, prose=verbose)
    if verbose:
        _render_findings(a, console)
        _render_notes(a, console)
    else:
        _render_folded_findings(a, console)
    if ctx.errors:
        console.print(
            Text(
                f"{len(ctx.errors)} request(s) failed; first: {ctx.errors[0].kind}: "
                f"{ctx.errors[0].message}",
                style="red",
            )
        )


def _render_verdict(ctx: ReportContext, console: Console) -> None:
    """The title, a partial run's warning and the verdict's sentences, one bullet each (wrapped
    lines hang under their sentence)."""
    info = ctx.info
    console.print(
        Text.assemble(
            ("specscope diagnosis", "bold"), ": ", info.model or info.endpoint or info.run_id
        )
    )
    if ctx.partial:
        console.print(
            Text(
                f"PARTIAL RUN — {ctx.status_line}. Numbers cover only what was measured.",
                style="bold yellow",
            )
        )
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for sentence in verdict_lines(ctx.analysis):
        grid.add_row("•", Text(sentence))  # Text: a sentence may quote server text
    console.print(grid)


def _render_notes(a: Analysis, console: Console) -> None:
    """Every note (claims tested and not reported, with their tests), but the loops note the
    panel already shows beside the commit length."""
    shown = _loops_note(a)
    for n in a.notes:
        if n != shown:
            console.print(Text(f"note: {n}", style="dim"))


def _loops_note(a: Analysis) -> str | None:
    """The headline's word on repetition loops when they dominate its commit length."""
    loops = a.headline_loops or {}
    return loops.get("note") if loops.get("dominant") else None


def _headline_panel(ctx: ReportContext, verbose: bool = False) -> Panel:
    """The figures in one panel: rate, TTFT, commit length, step time and their intervals, the
    baseline split and breakeven, precision, requests; `verbose` adds where the commit length
    came from, the decomposition and how the intervals were obtained."""
    a = ctx.analysis
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    _row = head.add_row

    def add_row(key: str, value: str) -> None:
        _row(key, Text(value))  # Text: values may hold server strings, never markup

    add_row("decode tokens/s", fmt(a.decode_tps, 1) + fmt_ci(a.decode_tps_ci, 1))
    if verbose or not ((a.serving or {}).get("run") or {}).get("ttft_s"):
        # folded, the serving table's TTFT row (just below) says it
        add_row("time to first token", fmt(a.ttft_s, 3, "s") + fmt_ci(a.ttft_s_ci, 3, unit="s"))
    source = f"  (from {a.commit_len_source})" if verbose and a.commit_len_source else ""
    add_row(
        "mean commit length",
        f"{fmt(a.mean_commit_len, 2)} tokens/step" + fmt_ci(a.mean_commit_len_ci, 2) + source,
    )
    if (loops := _loops_note(a)) is not None:
        _row(Text("loops dominate", style="bold yellow"), Text(loops))
    if (drafted := drafted_line(a)) is not None:
        add_row("per drafted step", drafted)
    add_row("mean step time", fmt_ms(a.mean_step_s) + fmt_ci(a.mean_step_s_ci, 1, 1e3, "ms"))
    if a.speculation:
        add_row("speculation", f"{a.speculation}: {a.speculation_reason}")
    for label, text in _split_rows(a, verbose):
        add_row(label, text)
    for label, text in breakeven_lines(a.breakeven, with_unmeasured=verbose):
        add_row(label, text)
    if verbose and a.interval_method:
        add_row("intervals", a.interval_method)
    if (reached := precision_line(a.precision, method=verbose)) is not None:
        add_row("precision", reached)
    add_row("requests (errors)", f"{a.requests} ({a.errors})")
    return Panel(head, title=Text("what was measured", style="bold"), expand=False)


def _split_rows(a: Analysis, verbose: bool) -> list[tuple[str, str]]:
    """The decomposition (verbose: the verdict states it) and the baseline split with its
    intervals (tps ratio, acceptance, step time)."""
    rows = []
    if verbose and a.mean_commit_len and a.mean_step_s:
        rows.append(
            (
                "decomposition",
                f"{fmt(a.mean_commit_len, 2)} / {fmt_ms(a.mean_step_s)} = "
                f"{fmt(a.mean_commit_len / a.mean_step_s, 1)} tokens/s",
            )
        )
    at = a.attribution
    if at is not None:
        # each factor with its own interval beside it: "1.98 (95% CI 1.51–2.57) = ..."
        ratio, acc, step = (
            fmt(v, 2) + fmt_interval(iv, 2)
            for v, iv in (
                (at.tps_ratio, at.tps_ratio_ci),
                (at.acceptance_factor, at.acceptance_factor_ci),
                (at.step_time_factor, at.step_time_factor_ci),
            )
        )
        rows.append(("vs baseline", f"tps ratio {ratio} = acceptance {acc} × step time {step}"))
    return rows


def _finding_grid(rank: int, head: Text, body: list[Text]) -> Table:
    """One finding: its ranked heading, then its lines hanging under it (wrapped lines too)."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, width=len(str(rank)) + 1)
    grid.add_column()
    grid.add_row(Text(f"{rank}.", style="bold cyan"), head)
    for line in body:
        grid.add_row("", line)
    return grid


def _next_line(next_: str) -> Text:
    return Text.assemble(("next: ", "bold green"), next_)


def _render_folded_findings(a: Analysis, console: Console) -> None:
    """The findings ranked, each as its sentence, factor and cause, the numbers that carry it
    and its next step; one line says where the tests and notes went."""
    if a.findings:
        console.print(Text("Findings", style="bold"))
    for rank, f in enumerate(a.findings, start=1):
        head = Text.assemble((f.id, "bold cyan"), f"  {finding_heading(f)}")
        body = [Text(f.summary)]
        if numbers := finding_numbers(f, test_of(a, f.id)):
            body.append(Text(" · ".join(numbers), style="dim"))
        if rank > 1:  # the first finding's next step is the verdict's, printed above
            body.append(_next_line(folded_next(f)))
        console.print(_finding_grid(rank, head, body))
    if a.finding_tests or a.notes:
        reported = sum(t.reported for t in a.finding_tests)
        console.print(
            Text(
                f"{_count(len(a.finding_tests), 'claim')} tested ({reported} reported), "
                f"{_count(len(a.notes), 'note')}: tests (p, q, method), notes in {FOLDED_HINT}",
                style="dim",
            )
        )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _render_findings(a: Analysis, console: Console) -> None:
    """The findings ranked, each with its confidence, every evidence line (the tests' too) and
    its next step (or why there is none)."""
    console.print(Text("Findings", style="bold"))
    if not a.findings:
        console.print(Text(f"No finding: {a.no_finding_reason or ''}"))
    for rank, f in enumerate(a.findings, start=1):
        head = Text.assemble(
            (f.id, "bold cyan"), f"  confidence {fmt(f.confidence, 2)}  {finding_heading(f)}"
        )
        body = [Text(f.summary)]
        body += [
            Text(f"• {e.label}: {fmt_value(e.value)} {e.unit}  [{e.source}]", style="dim")
            for e in f.evidence
        ]
        if f.next:
            body.append(_next_line(f.next))
        console.print(_finding_grid(rank, head, body))


def render_serving(serving: dict, console: Console, prose: bool = True) -> None:
    """The serving table: latency percentiles with the mean's interval, throughput, goodput, and
    a row per concurrency level when there are several. Without `prose` (the diagnosis folded)
    only the goodput line follows the table: throughput and the per-step identity are
    --verbose's."""
    rows = latency_rows(serving.get("run") or {})
    if rows:
        t = Table(
            # folded, the first header names the table: one line less on the first screen
            title=Text("Serving metrics") if prose else None,
            title_justify="left",
            box=box.SIMPLE_HEAD,
            padding=(0, 1),
            show_edge=False,  # no blank line above and below: the report fits a screen
        )
        for i, h in enumerate(TABLE_HEADER):
            header = "serving metric" if i == 0 and not prose else h
            t.add_column(header, justify="left" if i == 0 else "right", no_wrap=True)
        for r in rows:
            t.add_row(*r)
        console.print(t)
    for line in summary_lines(serving):
        if prose or line.startswith("goodput"):
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
            f"{plan.total_generated_tokens} generated tokens: about "
            f"{plan.total_estimate_s():.0f} s in all if {d:.1f} tok/s holds ({basis}): "
            f"{plan.elapsed_s:.0f} s so far, {plan.estimate_s():.0f} s of requests, "
            f"{plan.repeats_s:.0f} s of repeats, {FINISH_S:.0f} s to analyse."
        )
    )
    deadline = plan.precision.deadline_s if plan.precision is not None else None
    if deadline and plan.elapsed_s + plan.estimate_s() + FINISH_S > deadline:
        console.print(
            Text(
                f"at these rates the plan's requests alone run past --quick's {deadline:.0f} s",
                style="yellow",
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
