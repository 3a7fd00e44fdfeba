"""Markdown and terminal renderers: server text stays literal (no markup injection); the
threshold parser takes any well-formed percentage and refuses the rest."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from specscope.experiments.plan import Plan, PlanStep, SkippedPoint
from specscope.report import ReportContext, render_plan, render_terminal
from specscope.report.markdown import md_escape
from specscope.store.compare import parse_threshold
from support.reports import full_analysis, hostile_info


@given(st.text(max_size=200))
def test_md_escape_round_trips_and_leaves_no_live_markup(text):
    escaped = md_escape(text)
    assert re.sub(r"\\(.)", r"\1", escaped) == text.replace("\n", " ")
    # every markup character is preceded by a backslash
    for m in re.finditer(r"[`*_<>\[\]|#]", escaped):
        assert escaped[m.start() - 1] == "\\"


@given(st.floats(min_value=0, max_value=99.99, allow_nan=False))
def test_any_percentage_parses(x):
    assert abs(parse_threshold(f"{x}%") - x / 100) < 1e-9


def test_terminal_report_prints_rich_markup_literally():
    info = hostile_info("partial")
    info.model = "[bold red]pwn[/] <x>"
    a = full_analysis(partial=True)
    a.findings[0].summary = "[link=http://evil]click[/link]"
    a.verdict.append("Client and server disagree: [red]model said[/red]")
    for verbose in (False, True):
        console = Console(record=True, width=120, color_system=None)
        render_terminal(ReportContext(analysis=a, info=info), console, verbose=verbose)
        out = console.export_text()
        assert "[bold red]pwn[/] <x>" in out
        assert "[link=http://evil]click[/link]" in out
        assert "[red]model said[/red]" in out
        assert "PARTIAL RUN" in out
        assert "acceptance 1.72 × step time 2.44" in out
        # the partial warning, then the verdict, before the figures
        assert out.index("PARTIAL RUN") < out.index("Decode runs at") < out.index("╭")


def test_plan_rendering_groups_rounds_and_states_skips():
    plan = Plan(
        steps=[
            PlanStep("two_point", "n1", 100, 16),
            PlanStep("two_point", "n2", 100, 64),
            PlanStep("two_point", "n1", 100, 16),
            PlanStep("two_point", "n2", 100, 64),
        ],
        skipped=[SkippedPoint("context_sweep", "9000", "exceeds the context [red]")],
        notes=["--quick: trimmed"],
    )
    console = Console(record=True, width=160, color_system=None)
    render_plan(plan, console, "http://127.0.0.1:1")
    out = console.export_text()
    assert out.count("two_point:n1") == 1 and out.count("two_point:n2") == 1
    assert "skipped context_sweep:9000: exceeds the context [red]" in out
    assert "4 requests, 400 prompt + 160 generated tokens" in out
