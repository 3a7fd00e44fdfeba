"""Plotly figures from `Analysis.series` (one function per plot; None when the run lacks the data).

Figures only hold numbers and labels this module or analysis chose; server-provided text (model
names, error messages) stays in the escaped HTML around the plots, never in a figure.

A figure whose fullest trace has fewer than two points is not drawn (`Plot.why_not` says why):
one point is a number, not a trend, and an axis around it reads as a measurement of one. Every
trace here is a scatter or a bar, the traces of the basic plotly.js bundle the HTML report inlines
(report/html.py). Where a plot sits in the report is said here too (`LEAD`, `BESIDE_ATTRIBUTION`,
`SUPPORTS`): beside the finding or split it is evidence for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specscope.analysis.result import Analysis


@dataclass
class FigureSpec:
    key: str  # the series it draws (also the HTML id suffix)
    title: str
    explains: str  # one sentence under the plot: what to look for


def _layout(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    fig.update_layout(
        title=title,
        xaxis_title=x,
        yaxis_title=y,
        template="plotly_white",
        height=380,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def _list(series: dict[str, Any], key: str) -> list[Any]:
    v = series.get(key)
    return list(v) if isinstance(v, list | tuple) else []


def commit_len_histogram(s: dict[str, Any]) -> go.Figure | None:
    x, y = _list(s, "commit_len"), _list(s, "count")
    if not x or len(x) != len(y):
        return None
    fig = go.Figure(go.Bar(x=x, y=y, name="verify steps"))
    return _layout(fig, "Commit length per verify step", "tokens committed (accepted + 1)", "steps")


def commit_len_by_position(s: dict[str, Any]) -> go.Figure | None:
    x, y = _list(s, "output_pos"), _list(s, "mean_commit_len")
    if not x or len(x) != len(y):
        return None
    fig = go.Figure(go.Scatter(x=x, y=y, mode="lines+markers", name="mean commit length"))
    return _layout(
        fig, "Commit length over output position", "output position (tokens)", "tokens per step"
    )


def step_time_by_position(s: dict[str, Any]) -> go.Figure | None:
    x, y = _list(s, "output_pos"), _list(s, "step_s")
    if not x or len(x) != len(y):
        return None
    fig = go.Figure(
        go.Scatter(
            x=x,
            y=[v * 1e3 if v is not None else None for v in y],
            mode="markers",
            name="observed step time",
            marker={"size": 4},
        )
    )
    exp = _list(s, "expected_step_s")
    if len(exp) == len(x) and any(v is not None for v in exp):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[v * 1e3 if v is not None else None for v in exp],
                mode="lines",
                name="context model's expectation",
            )
        )
    return _layout(fig, "Step time over output position", "output position (tokens)", "ms per step")


def tps_by_context(s: dict[str, Any]) -> go.Figure | None:
    x, y = _list(s, "context"), _list(s, "decode_tps")
    if not x or len(x) != len(y):
        return None
    fig = go.Figure(go.Scatter(x=x, y=y, mode="lines+markers", name="decode tok/s"))
    return _layout(fig, "Decode rate vs context", "context (tokens)", "tokens/s")


def tps_by_output_len(s: dict[str, Any]) -> go.Figure | None:
    x, y = _list(s, "max_tokens"), _list(s, "decode_tps")
    if not x or len(x) != len(y):
        return None
    fig = go.Figure(go.Scatter(x=x, y=y, mode="lines+markers", name="decode tok/s"))
    return _layout(
        fig, "Decode rate vs generation length (short prompt)", "tokens generated", "tokens/s"
    )


def two_point_vs_full(s: dict[str, Any]) -> go.Figure | None:
    x, y = _list(s, "label"), _list(s, "decode_tps")
    if not x or len(x) != len(y):
        return None
    fig = go.Figure(go.Bar(x=[str(v) for v in x], y=y, name="decode tok/s"))
    return _layout(fig, "Two-point estimate vs full generation", "", "tokens/s")


def baseline_vs_observed(s: dict[str, Any]) -> go.Figure | None:
    labels = [str(v) for v in _list(s, "label")]
    if not labels:
        return None
    cols = [
        ("decode_tps", "tokens/s"),
        ("mean_commit_len", "commit length"),
        ("mean_step_s", "step time (ms)"),
    ]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[c[1] for c in cols])
    for i, (key, _) in enumerate(cols, start=1):
        vals = _list(s, key)
        if len(vals) != len(labels):
            continue
        if key == "mean_step_s":
            vals = [v * 1e3 if v is not None else None for v in vals]
        fig.add_trace(go.Bar(x=labels, y=vals, name=key, showlegend=False), row=1, col=i)
    fig.update_layout(
        title="Baseline vs observed",
        template="plotly_white",
        height=380,
        margin={"l": 60, "r": 20, "t": 70, "b": 50},
    )
    return fig


def concurrency(s: dict[str, Any]) -> go.Figure | None:
    x, y = _list(s, "concurrency"), _list(s, "decode_tps_per_request")
    if not x or len(x) != len(y):
        return None
    fig = go.Figure(go.Scatter(x=x, y=y, mode="lines+markers", name="per-request tok/s"))
    return _layout(fig, "Per-request decode rate vs concurrency", "requests in flight", "tokens/s")


def breakeven(s: dict[str, Any]) -> go.Figure | None:
    """Both runs' fitted per-request decode rate vs concurrency with their 95% bands, the
    measured sweep points, and the crossover marked."""
    x = _list(s, "concurrency")
    if not x:
        return None
    fig = go.Figure()
    for label, color in (("observed", "#1f77b4"), ("baseline", "#ff7f0e")):
        y, lo, hi = (
            _list(s, f"{label}_tps"),
            _list(s, f"{label}_tps_low"),
            _list(s, f"{label}_tps_high"),
        )
        if len(y) != len(x):
            continue
        if len(lo) == len(x) and len(hi) == len(x):
            fig.add_trace(
                go.Scatter(
                    x=x + x[::-1],
                    y=hi + lo[::-1],
                    fill="toself",
                    opacity=0.2,
                    line={"width": 0, "color": color},
                    hoverinfo="skip",
                    name=f"{label} 95% band",
                )
            )
        fig.add_trace(
            go.Scatter(x=x, y=y, mode="lines", line={"color": color}, name=f"{label} (fitted)")
        )
        pts = s.get(f"{label}_points")
        if isinstance(pts, dict) and _list(pts, "concurrency"):
            fig.add_trace(
                go.Scatter(
                    x=_list(pts, "concurrency"),
                    y=_list(pts, "decode_tps_per_request"),
                    mode="markers",
                    marker={"color": color, "size": 8},
                    name=f"{label} (measured)",
                )
            )
    cross = s.get("crossover")
    if isinstance(cross, int | float):
        fig.add_vline(
            x=float(cross),
            line_dash="dash",
            line_color="#444",
            annotation_text=f"breakeven {float(cross):.1f}",
        )
    fig.update_xaxes(type="log")
    return _layout(
        fig,
        "Per-request decode rate vs concurrency: this run and the baseline",
        "requests in flight (batch)",
        "tokens/s per request",
    )


FIGURES: list[tuple[FigureSpec, Callable[[dict[str, Any]], go.Figure | None]]] = [
    (
        FigureSpec(
            "commit_len_histogram",
            "Commit-length histogram",
            "How many tokens each verify step committed; mass at 1-2 means the drafter is "
            "rarely right.",
        ),
        commit_len_histogram,
    ),
    (
        FigureSpec(
            "commit_len_by_position",
            "Commit length over output position",
            "A falling line: early tokens are easy (the honeymoon), later ones are not.",
        ),
        commit_len_by_position,
    ),
    (
        FigureSpec(
            "step_time_by_position",
            "Step time over output position",
            "Points above the context model's line are excess step time; excess that grows "
            "with position points to stateful degradation.",
        ),
        step_time_by_position,
    ),
    (
        FigureSpec(
            "tps_by_context",
            "Decode rate vs context",
            "Attention-bound decode slows as context grows; this is the expected part.",
        ),
        tps_by_context,
    ),
    (
        FigureSpec(
            "tps_by_output_len",
            "Decode rate vs generation length",
            "At low context, a rate that falls with length is not the context's doing.",
        ),
        tps_by_output_len,
    ),
    (
        FigureSpec(
            "two_point_vs_full",
            "Two-point vs full generation",
            "A two-point window over early tokens can overstate a long generation.",
        ),
        two_point_vs_full,
    ),
    (
        FigureSpec(
            "baseline_vs_observed",
            "Baseline vs observed",
            "The tps ratio splits exactly into commit length and step time.",
        ),
        baseline_vs_observed,
    ),
    (
        FigureSpec(
            "concurrency",
            "Concurrency",
            "Per-request rate falling with concurrency is batching interference.",
        ),
        concurrency,
    ),
    (
        FigureSpec(
            "breakeven",
            "Breakeven vs baseline",
            "Where the lines cross, speculation stops paying per request; bands are 95% "
            "bootstrap intervals of the fitted step-time model.",
        ),
        breakeven,
    ),
]


# The two plots that carry most diagnoses (step time and commit length along the generation:
# tokens/s is their ratio) open the report, right after the headline.
LEAD: tuple[str, ...] = ("step_time_by_position", "commit_len_by_position")
# The baseline's plots sit beside the attribution they split.
BESIDE_ATTRIBUTION: tuple[str, ...] = ("baseline_vs_observed", "breakeven")
# Finding id (analysis/diagnosis/cards.py) -> the plots that are its evidence, drawn under it
# (a plot already drawn higher up is linked, not drawn twice). Plots no finding of the run
# claims go to the end of the report.
SUPPORTS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "acceptance_decay": ("commit_len_by_position",),
        "draft_window": ("commit_len_by_position",),
        "acceptance_low": ("commit_len_histogram",),
        "draft_coverage": ("commit_len_histogram",),
        "speculation_overhead": ("commit_len_histogram",),
        "step_time_drift": ("step_time_by_position", "tps_by_output_len"),
        "context_scaling": ("tps_by_context",),
        "two_point_bias": ("two_point_vs_full",),
        "batching_interference": ("concurrency",),
    }
)
MIN_POINTS = 2


@dataclass
class Plot:
    spec: FigureSpec
    fig: go.Figure | None  # None: not drawn
    why_not: str = ""  # "not measured" (no usable series) or "one point"; "" when drawn


def points(fig: go.Figure) -> int:
    """Points in the figure's fullest trace (a band's outline, `fill="toself"`, is not data)."""
    return max(
        (
            sum(v is not None for v in (t.y or ()))
            for t in fig.data
            if getattr(t, "fill", None) != "toself"
        ),
        default=0,
    )


def build_figures(analysis: Analysis) -> list[Plot]:
    """Every known plot; those this run has no data for, or only one point of, not drawn."""
    out: list[Plot] = []
    for spec, fn in FIGURES:
        series = analysis.series.get(spec.key)
        fig = None
        if isinstance(series, dict):
            try:
                fig = fn(series)
            except (TypeError, ValueError):
                fig = None  # malformed series in a hand-edited analysis.json: no plot, no crash
        if fig is None or points(fig) == 0:
            out.append(Plot(spec, None, "not measured"))
        elif points(fig) < MIN_POINTS:
            out.append(Plot(spec, None, "one point"))
        else:
            out.append(Plot(spec, fig))
    return out
