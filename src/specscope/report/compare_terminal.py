"""`specscope compare`'s terminal view: both rates, the exact split of their ratio into
acceptance and step time with its intervals, what changed, the findings that differ, and how
much slower B is."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

from specscope.report.context import fmt, fmt_interval
from specscope.store.compare import Comparison


def render_compare(
    cmp: Comparison, run_a: Path, run_b: Path, slower: float | None, console: Console
) -> None:
    """Lines of plain text (run dirs and finding summaries are never markup): B's verdict
    against A first, then both rates and the split."""
    for sentence in cmp.verdict:
        console.print(Text(f"• {sentence}"))
    console.print(
        Text(f"A {run_a}: {fmt(cmp.tps_a, 1)} tok/s   B {run_b}: {fmt(cmp.tps_b, 1)} tok/s")
    )
    for side, an in (("A", cmp.a), ("B", cmp.b)):
        if an is not None and an.speculation:
            console.print(Text(f"speculation {side}: {an.speculation} ({an.speculation_reason})"))
    console.print(
        Text(
            f"tps ratio A/B {fmt(cmp.tps_ratio, 3)} = acceptance factor "
            f"{fmt(cmp.acceptance_factor, 3)} × step-time factor "
            f"{fmt(cmp.step_time_factor, 3)}"
        )
    )
    at = cmp.attribution
    if at is not None and at.tps_ratio_ci is not None:
        console.print(
            Text(
                f"95% intervals: tps ratio{fmt_interval(at.tps_ratio_ci)}, "
                f"acceptance{fmt_interval(at.acceptance_factor_ci)}, step time"
                f"{fmt_interval(at.step_time_factor_ci)}"
            )
        )
    console.print(Text(f"what changed: {cmp.what_changed['verdict']}"))
    if cmp.new_findings:
        console.print(Text(f"new in B: {', '.join(cmp.new_findings)}"))
    if cmp.resolved_findings:
        console.print(Text(f"gone in B: {', '.join(cmp.resolved_findings)}"))
    for f in cmp.b_findings:
        console.print(Text(f"- {f.id}: {f.summary}"))
    if slower is not None:
        console.print(
            Text(f"B is {abs(slower) * 100:.1f}% {'slower' if slower > 0 else 'faster'} than A")
        )


def render_attribution_missing(error: Exception, console: Console) -> None:
    """Why the attribution from traces is missing (the comparison falls back to headlines)."""
    console.print(
        f"note: attribution from traces unavailable ({error.__class__.__name__}: {error}); "
        "using headline numbers",
        markup=False,
        highlight=False,
    )


def render_regression(slower: float, threshold: float, console: Console) -> None:
    """The regression gate's verdict: B is slower than A by more than --fail-if-slower."""
    console.print(
        f"regression: B is {slower * 100:.1f}% slower than A (threshold {threshold * 100:.0f}%)",
        markup=False,
        highlight=False,
    )
