"""A watch's run directory as one self-contained HTML page (`specscope report RUN_DIR` where the
directory holds a watch.json): what was watched and how, the summary, the timeline of every
window (watch_figures.py) with the alerts and recorded faults marked, each alert's text, the
recorded faults, and the windows' figures in a folded table.

It reuses the diagnosis report's page (html.py): its stylesheet, its inlined plotly bundle and
its escaping: every string read from the run directory goes through `html.escape` (a server's
error message, a log line, the URL, even a factor name: the files are data on disk and may
hold anything), and the figure's JSON has `</` broken up so that nothing closes its script."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specscope.report.context import fmt_ci
from specscope.report.html import (
    PAGE_CSS,
    details_block,
    escape,
    plotly_bundle,
    safe_json,
    wide_block,
    write_page,
)
from specscope.report.watch_figures import number, timeline

ROWS_SHOWN = 2000  # windows in the folded table (the plot holds them all)
ERRORS_SHOWN = 200


@dataclass(frozen=True)
class RecordedWatch:
    """A watch's run directory read back: watch.json's options, the window events and the
    other events in file order, and how many lines could not be read (a watch killed mid-line,
    or a file edited by hand)."""

    path: str
    options: dict[str, Any]
    windows: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    unreadable: int = 0

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]


def when(t: object) -> str:
    """A unix time as 'YYYY-MM-DD HH:MM:SS UTC', '-' when it is not one."""
    v = number(t)
    return "-" if v is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(v))


def _num(v: object, digits: int = 2, scale: float = 1.0) -> str:
    x = number(v)
    return "-" if x is None else f"{x * scale:.{digits}f}"


def _ci(v: object, digits: int = 2, scale: float = 1.0) -> str:
    if not isinstance(v, list) or len(v) != 2 or any(number(x) is None for x in v):
        return ""
    return fmt_ci([float(v[0]), float(v[1])], digits, scale)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Rows under a header; the last column is free text that may break anywhere."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{escape(c)}</td>" for c in r[:-1])
        + f"<td class='msg'>{escape(r[-1])}</td></tr>"
        for r in rows
    )
    return wide_block(f"<table><tr>{head}</tr>{body}</table>")


def _pairs(rows: Sequence[tuple[str, object]]) -> str:
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return wide_block(f"<table>{body}</table>")


def _overview(w: RecordedWatch) -> str:
    """What was watched, with which options, and the summary (or why there is none)."""
    o, start = w.options, (w.of("start") or [{}])[0]
    plain = start.get("plain_baseline")
    rows = [
        ("server", o.get("url") or start.get("url")),
        ("started", when(start.get("t"))),
        (
            "canary",
            f"every {_num(o.get('probe_every_s'), 0)} s, {o.get('prompt_tokens')} "
            f"prompt + {o.get('max_tokens')} output tokens",
        ),
        ("window", f"every {_num(o.get('interval_s'), 0)} s"),
        ("baseline", start.get("baseline") or "-"),
        ("plain reference (speedup)", plain.get("source") if isinstance(plain, dict) else "none"),
        ("design false-alarm rate", f"{_num(o.get('false_alarms_per_day'))} per 24 h"),
    ]
    out = _pairs(rows)
    summary = w.of("summary")
    if not summary:
        return out + (
            "<p class='partial'><b>No summary:</b> the watch was killed before it ended; "
            f"{len(w.windows)} windows were recorded up to then.</p>"
        )
    s = summary[-1]
    cards = [
        ("windows", s.get("windows")),
        ("canaries (failed)", f"{s.get('canaries')} ({s.get('canary_errors')})"),
        ("alerts", len(w.of("alert"))),
        ("recorded faults", s.get("errors")),
        ("ended", when(s.get("t")) + (" (interrupted)" if s.get("interrupted") else "")),
    ]
    return (
        out
        + '<div class="headline">'
        + "".join(
            f'<div class="card"><div class="v">{escape(v)}</div><div class="k">{escape(k)}</div></div>'
            for k, v in cards
        )
        + "</div>"
    )


def _alerts(w: RecordedWatch) -> str:
    """Every alert as the watch said it, then recoveries and diagnoses."""
    rows = [
        (
            when(a.get("t")),
            a.get("factor"),
            f"x{_num(a.get('ratio'), 3)}{_ci(a.get('ci'), 3)}",
            when(a.get("since")),
            a.get("cause") or " or ".join(map(str, a.get("candidates") or [])) or "-",
            a.get("reason"),
        )
        for a in w.of("alert")
    ]
    out = (
        _table(("raised", "factor", "ratio", "since", "cause / candidates", "why"), rows)
        if rows
        else "<p>No alert.</p>"
    )
    later = [(when(r.get("t")), "recovered", r.get("factor"), "") for r in w.of("recovered")]
    later += [
        (
            when(d.get("t")),
            "diagnosis",
            d.get("cause") or "-",
            f"{d.get('run_dir') or ''} {d.get('message') or ''}",
        )
        for d in w.of("diagnosis")
    ]
    if later:
        out += _table(
            ("at", "event", "factor / cause", "detail"), sorted(later, key=lambda r: r[0])
        )
    return out


def _errors(w: RecordedWatch) -> str:
    errors = w.of("error")
    if not errors:
        return "<p>No recorded fault.</p>"
    rows = [
        (when(e.get("t")), e.get("source"), e.get("kind"), e.get("message"))
        for e in errors[:ERRORS_SHOWN]
    ]
    more = (
        f"<p>... and {len(errors) - ERRORS_SHOWN} more.</p>" if len(errors) > ERRORS_SHOWN else ""
    )
    return _table(("at", "source", "kind", "message"), rows) + more


def _windows(w: RecordedWatch) -> str:
    shown = w.windows[-ROWS_SHOWN:]
    rows = [
        (
            when(x.get("t")),
            x.get("state"),
            x.get("canaries"),
            _num(x.get("decode_tps"), 1) + _ci(x.get("decode_tps_ci"), 1),
            _num(x.get("mean_commit_len")) + _ci(x.get("mean_commit_len_ci")),
            _num(x.get("mean_step_s"), 1, 1e3) + _ci(x.get("mean_step_s_ci"), 1, 1e3),
            x.get("speculation"),
            _num(x.get("speedup")) + _ci(x.get("speedup_ci")),
        )
        for x in shown
    ]
    cut = f" (the last {ROWS_SHOWN})" if len(w.windows) > ROWS_SHOWN else ""
    table = _table(
        ("end", "state", "canaries", "tok/s", "tok/step", "ms/step", "speculation", "speedup"), rows
    )
    return details_block(f"Every window's figures{cut}", table)


def _timeline(w: RecordedWatch) -> str:
    marks = [e for e in w.events if e.get("event") in ("alert", "error")]
    fig = timeline(w.windows, marks)
    if fig is None:
        return (
            f"<p class='nodata'>{escape(len(w.windows))} windows: too few with figures to plot.</p>"
        )
    payload = safe_json(fig.to_json())
    return (
        '<div class="plot"><div id="plot-watch-timeline" class="plotly-graph-div"></div>'
        '<p class="explains">One point per window, its 95% interval as error bars; red lines are '
        "alerts, orange crosses recorded faults; below the dashed line at 1 speculation is not "
        "paying.</p>"
        f'<script type="text/javascript">(function(){{var f={payload};'
        'Plotly.newPlot("plot-watch-timeline",f.data,f.layout,{responsive:true,displaylogo:false});})();</script></div>'
    )


def render_watch_html(w: RecordedWatch) -> str:
    title = f"specscope watch — {w.options.get('url') or w.path}"
    unreadable = (
        f"<p class='partial'>{escape(w.unreadable)} lines of the event files could not be read "
        "and are left out.</p>"
        if w.unreadable
        else ""
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{PAGE_CSS}</style>"
        f'<script type="text/javascript">{plotly_bundle()}</script></head><body>'
        f'<h1>{escape(title)}</h1><div class="meta">run directory <code>{escape(w.path)}</code></div>'
        + unreadable
        + f"<h2>Watch</h2>{_overview(w)}<h2>Timeline</h2>{_timeline(w)}"
        + f"<h2>Alerts</h2>{_alerts(w)}<h2>Recorded faults</h2>{_errors(w)}"
        + f"<h2>Windows</h2>{_windows(w)}</body></html>\n"
    )


def write_watch_html(w: RecordedWatch, path: Path) -> Path:
    return write_page(render_watch_html(w), path)
