"""`specscope compare RUN_A RUN_B`: tps ratio split into acceptance and step time; with
`--fail-if-slower 10%` a regression gate (exit 1 when B is more than 10% slower than A)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specscope.analysis.workload.routing import what_changed
from specscope.commands.common import (
    EXIT_TARGET_MISBEHAVED,
    err_console,
    fail_usage,
    out_console,
    print_json,
)
from specscope.report.compare_terminal import (
    render_attribution_missing,
    render_compare,
    render_regression,
)
from specscope.report.contract import compare_json, comparison_json
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
        render_attribution_missing(e, err_console)
        b_vs_a = None
    cmp = compare_analyses(a, b, b_vs_a)
    cmp.what_changed = what_changed(
        comparison_json(cmp), run_a_obj.requests, run_b_obj.requests, a.ttft_s, b.ttft_s
    )
    slower = cmp.slower_by()
    failed = threshold is not None and slower is not None and slower > threshold
    if json_:
        print_json(compare_json(cmp, run_a, run_b, threshold, failed))
    else:
        render_compare(cmp, run_a, run_b, slower, out_console)
    if failed:
        render_regression(slower, threshold, err_console)
        raise typer.Exit(EXIT_TARGET_MISBEHAVED)
