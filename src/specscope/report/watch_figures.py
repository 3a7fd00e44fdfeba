"""The watch's timeline (`specscope report` on a watch's run directory): one plotly figure of
stacked rows sharing a time axis, one point per window with its 95% interval as error bars:
decode rate, commit length, step time, and speculation's speedup when a plain reference was
given (with a line at 1: below it speculation is not paying). Alerts are red vertical lines,
recorded faults orange ones, each with a marker whose hover names it.

As in figures.py, a figure holds only numbers and labels this module chose: the event files
are read back from disk and may hold anything, so a factor or an error source outside the
watch's own vocabulary is drawn as "other", and every message stays in the escaped HTML around
the plot. Fewer than two windows with a figure draw nothing (one point is not a trend)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

FACTORS = frozenset({"commit_len", "step_time", "speculation_off"})
SOURCES = frozenset({"canary", "metrics", "logs", "alert_cmd"})


@dataclass(frozen=True)
class Row:
    key: str  # the window event's key; its interval is key + "_ci"
    title: str
    scale: float  # the plotted value = the event's x scale (seconds -> ms)


ROWS = (
    Row("decode_tps", "decode rate (tok/s)", 1.0),
    Row("mean_commit_len", "commit length (tok/step)", 1.0),
    Row("mean_step_s", "step time (ms)", 1e3),
)
SPEEDUP = Row("speedup", "speedup over plain (x)", 1.0)


def number(v: object) -> float | None:
    """A finite number from a JSON value, else None (booleans are not numbers here)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def stamp(t: float) -> str:
    """A unix time as plotly's date string, in UTC (the axis says so)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}"


def _series(
    windows: Sequence[dict[str, Any]], row: Row
) -> tuple[list[str], list[float], list[float], list[float]]:
    """(times, values, upper error, lower error) of the windows that have this figure."""
    xs, ys, up, down = [], [], [], []
    for w in windows:
        t, y = number(w.get("t")), number(w.get(row.key))
        if t is None or y is None:
            continue
        ci = w.get(row.key + "_ci")
        lo, hi = (
            (number(ci[0]), number(ci[1]))
            if isinstance(ci, list) and len(ci) == 2
            else (None, None)
        )
        xs.append(stamp(t))
        ys.append(y * row.scale)
        up.append(max(0.0, hi - y) * row.scale if hi is not None else 0.0)
        down.append(max(0.0, y - lo) * row.scale if lo is not None else 0.0)
    return xs, ys, up, down


def _label(e: dict[str, Any], key: str, known: frozenset[str]) -> str:
    """The event's factor or source if it is one of the watch's own, else "other"."""
    v = e.get(key)
    return v if isinstance(v, str) and v in known else "other"


def _marks(fig: go.Figure, events: Sequence[dict[str, Any]], rows: int, top: float) -> None:
    """Alerts: a red line through every row, the factor written above the top one. Recorded
    faults: orange crosses along the top row's highest value (`top`), their source on hover
    (one trace, however many: a server down for hours is hundreds of canary errors)."""
    errors: list[tuple[str, str]] = []
    for e in events:
        t = number(e.get("t"))
        if t is None:
            continue
        if e.get("event") != "alert":
            errors.append((stamp(t), "error: " + _label(e, "source", SOURCES)))
            continue
        for row in range(1, rows + 1):
            fig.add_vline(
                x=stamp(t),
                line={"color": "#c0392b", "width": 1.5},
                row=row,
                col=1,
                **(
                    {"annotation_text": "alert " + _label(e, "factor", FACTORS)} if row == 1 else {}
                ),
            )
    if errors:
        fig.add_trace(
            go.Scatter(
                x=[x for x, _ in errors],
                y=[top] * len(errors),
                mode="markers",
                marker={"color": "#e67e22", "symbol": "x", "size": 9},
                hovertext=[h for _, h in errors],
                hoverinfo="text+x",
                name="recorded faults",
            ),
            row=1,
            col=1,
        )


def timeline(
    windows: Sequence[dict[str, Any]], marks: Sequence[dict[str, Any]]
) -> go.Figure | None:
    """The timeline of these window events with these alert and error events marked; None
    when fewer than two windows have a decode rate, a commit length or a step time."""
    rows = [
        *ROWS,
        *([SPEEDUP] if any(number(w.get("speedup")) is not None for w in windows) else []),
    ]
    data = [_series(windows, r) for r in rows]
    if max(len(d[0]) for d in data) < 2:
        return None
    fig = make_subplots(
        rows=len(rows),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.04,
        subplot_titles=[r.title for r in rows],
    )
    for i, (row, (xs, ys, up, down)) in enumerate(zip(rows, data, strict=True), start=1):
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines+markers",
                name=row.title,
                marker={"size": 5},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": up,
                    "arrayminus": down,
                    "thickness": 1,
                },
            ),
            row=i,
            col=1,
        )
    if len(rows) > len(ROWS):
        fig.add_hline(y=1.0, line={"color": "#555", "dash": "dash"}, row=len(rows), col=1)
    _marks(fig, marks, len(rows), max(data[0][1], default=0.0))
    fig.update_layout(
        template="plotly_white",
        height=220 * len(rows) + 80,
        showlegend=False,
        margin={"l": 60, "r": 20, "t": 40, "b": 50},
        hovermode="closest",
    )
    fig.update_xaxes(title_text="time (UTC)", row=len(rows), col=1)
    return fig
