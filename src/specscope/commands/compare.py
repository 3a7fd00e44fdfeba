"""`specscope compare RUN_A RUN_B`: tps ratio split into acceptance and step time; with
`--fail-if-slower 10%` a regression gate (exit 1 when B is more than 10% slower than A)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from specscope.analysis.routing import what_changed
from specscope.commands.common import (
    EXIT_TARGET_MISBEHAVED,
    err_console,
    fail_usage,
    out_console,
    print_json,
)
from specscope.report.context import fmt, fmt_interval
from specscope.store.analyses import analyze_run, load_analysis
from specscope.store.compare import compare_analyses, parse_threshold
from specscope.trace.rundir import RunDirError


def compare(
    run_a: Annotated[Path, typer.Argument(help="Baseline run dir")],
    run_b: Annotated[Path, typer.Argument(help="Observed run dir")],
    json_: Annotated[bool, typer.Option("--json", help="Print one JSON object")] = False,
    fail_if_slower: Annotated[
        str | None,
        typer.Option(
            "--fail-if-slower", help="Exit 1 when B is slower than A by more than this, e.g. 10%"
        ),
    ] = None,
) -> None:
    threshold = None
    if fail_if_slower is not None:
        try:
            threshold = parse_threshold(fail_if_slower)
        except ValueError as e:
            fail_usage(str(e))
    try:
        run_a_obj, a = load_analysis(run_a)
        run_b_obj, b = load_analysis(run_b)
    except RunDirError as e:
        fail_usage(str(e))
    try:
        b_vs_a = analyze_run(run_b_obj, baseline=run_a_obj)
    except Exception as e:  # attribution is a bonus over headline ratios; say why it is missing
        err_console.print(
            f"note: attribution from traces unavailable ({e.__class__.__name__}: {e}); "
            "using headline numbers",
            markup=False,
            highlight=False,
        )
        b_vs_a = None
    cmp = compare_analyses(a, b, b_vs_a)
    cmp.what_changed = what_changed(
        cmp.to_dict(), run_a_obj.requests, run_b_obj.requests, a.ttft_s, b.ttft_s
    )
    slower = cmp.slower_by()
    failed = threshold is not None and slower is not None and slower > threshold
    if json_:
        d = cmp.to_dict()
        d["run_a"], d["run_b"] = str(run_a), str(run_b)
        d["fail_if_slower"] = threshold
        d["failed"] = failed
        print_json(d)
    else:
        out_console.print(
            Text(f"A {run_a}: {fmt(cmp.tps_a, 1)} tok/s   B {run_b}: {fmt(cmp.tps_b, 1)} tok/s")
        )
        for side, an in (("A", cmp.a), ("B", cmp.b)):
            if an is not None and an.speculation:
                out_console.print(
                    Text(f"speculation {side}: {an.speculation} ({an.speculation_reason})")
                )
        out_console.print(
            Text(
                f"tps ratio A/B {fmt(cmp.tps_ratio, 3)} = acceptance factor "
                f"{fmt(cmp.acceptance_factor, 3)} × step-time factor "
                f"{fmt(cmp.step_time_factor, 3)}"
            )
        )
        at = cmp.attribution
        if at is not None and at.tps_ratio_ci is not None:
            out_console.print(
                Text(
                    f"95% intervals: tps ratio{fmt_interval(at.tps_ratio_ci)}, "
                    f"acceptance{fmt_interval(at.acceptance_factor_ci)}, step time"
                    f"{fmt_interval(at.step_time_factor_ci)}"
                )
            )
        out_console.print(Text(f"what changed: {cmp.what_changed['verdict']}"))
        if cmp.new_findings:
            out_console.print(Text(f"new in B: {', '.join(cmp.new_findings)}"))
        if cmp.resolved_findings:
            out_console.print(Text(f"gone in B: {', '.join(cmp.resolved_findings)}"))
        for f in cmp.b_findings:
            out_console.print(Text(f"- {f.id}: {f.summary}"))
        if slower is not None:
            out_console.print(
                Text(f"B is {abs(slower) * 100:.1f}% {'slower' if slower > 0 else 'faster'} than A")
            )
    if failed:
        err_console.print(
            f"regression: B is {slower * 100:.1f}% slower than A "
            f"(threshold {threshold * 100:.0f}%)",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(EXIT_TARGET_MISBEHAVED)
