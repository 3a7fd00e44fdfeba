"""One self-contained HTML file: plotly.js inlined once, no network needed to view it.

Every string that came from the server or the run (model name, endpoint, error messages, finding
text, notes) goes through `html.escape`; figure JSON has `</` broken up so that no data can close
the script element it sits in.

The plotly.js inlined is the basic bundle (scatter, bar, pie and the core: axes, log axes,
shapes, annotations, subplots, templates), vendored as package data in `report/vendor/` (npm's
`plotly.js-basic-dist-min`, MIT, the same plotly.js version the pinned Python `plotly` ships;
vendor/README.md). Why this and not the others (#36: a report of at most 1.5 MB):
- the full bundle that Python `plotly` ships is 4.8 MB, 98% of every report; every trace the
  report draws (figures.py) is a scatter or a bar, which the basic bundle's 1.2 MB holds, so a
  report is ~1.25 MB with its plots' content, zoom and hover unchanged;
- one shared copy beside the runs (a `<script src>`) breaks the report once it is mailed or
  moved, and a report that loads it from a CDN needs the network;
- static SVG needs another plotting stack (plotly's image export needs kaleido and a browser;
  matplotlib would be a new dependency, and every figure drawn again in it) and loses hover,
  which reads the exact values off a plot.
Vendoring costs 1.2 MB in the repository, and a fresh clone needs no npm.

Layout (figures.py says where each plot goes: LEAD, BESIDE_ATTRIBUTION, SUPPORTS): the verdict,
the headline, then the step-time and commit-length-over-position plots (tokens/s is their
ratio), the attribution with the baseline's plots, the findings each with the plots that are its
evidence, and the plots no finding claims last. A plot with fewer than two points is not drawn;
one line names what was not. Wide content (tables, long unbroken server strings) wraps or
scrolls inside its own box: the page itself never scrolls sideways.
"""

from __future__ import annotations

import functools
import html
import json
import re
from importlib import resources
from pathlib import Path

from specscope.analysis.result import Analysis, Finding
from specscope.report.context import (
    ReportContext,
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
from specscope.report.figures import BESIDE_ATTRIBUTION, LEAD, SUPPORTS, Plot, build_figures
from specscope.report.serving import (
    GLOSSARY,
    GLOSSARY_HEADER,
    LEVEL_HEADER,
    TABLE_HEADER,
    latency_rows,
    level_rows,
    summary_lines,
)

# Nothing may widen the page past its window (#36: 1400 px): tables sit in `.wide` boxes that
# scroll on their own; an error message and the glossary's metric names
# (`vllm:time_to_first_token_seconds`) may break anywhere, else one unbroken word sets its
# column's width; two plots side by side get their columns before plotly sizes them.
PAGE_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#1d2430;padding:0 1rem;overflow-wrap:break-word}
h1{font-size:1.6rem;margin-bottom:.2rem} h2{margin-top:2rem;border-bottom:1px solid #dde;padding-bottom:.3rem}
.meta{color:#556;font-size:.9rem}
.partial{background:#fff3cd;border:1px solid #e0b400;padding:.6rem 1rem;border-radius:6px;margin:1rem 0}
.headline{display:flex;gap:1rem;flex-wrap:wrap}
.card{border:1px solid #dde;border-radius:8px;padding:.7rem 1rem;min-width:150px}
.card .v{font-size:1.5rem;font-weight:600} .card .k{color:#556;font-size:.85rem}
table{border-collapse:collapse;margin:.5rem 0} td,th{border:1px solid #dde;padding:.3rem .6rem;text-align:left}
.wide{max-width:100%;overflow-x:auto} td.msg{overflow-wrap:anywhere;min-width:16rem}
.finding{border-left:4px solid #3b6ea5;padding:.3rem 1rem;margin:1rem 0;background:#f7f9fc}
.finding .id{font-family:monospace;color:#3b6ea5} .next{margin-top:.4rem}
.verdict li{margin:.25rem 0} .numbers{color:#334} details{margin:.4rem 0} summary{cursor:pointer;color:#556}
.plots{display:grid;grid-template-columns:minmax(0,1fr);gap:1rem;margin:1rem 0}
.plots.two{grid-template-columns:repeat(2,minmax(0,1fr))}
@media (max-width:900px){.plots.two{grid-template-columns:minmax(0,1fr)}}
.plot{min-width:0} .explains{color:#556;font-size:.9rem} .nodata{color:#889;font-style:italic}
code{background:#f0f2f5;padding:0 .2rem}
.glossary{margin-top:2.5rem;font-size:.85rem;color:#334}
.glossary code{overflow-wrap:anywhere}
"""


def escape(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def safe_json(text: str) -> str:
    # plotly's encoder already writes < and > as \u003c/\u003e; this is a second belt.
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _card(key: str, value: str) -> str:
    return f'<div class="card"><div class="v">{escape(value)}</div><div class="k">{escape(key)}</div></div>'


def _headline(ctx: ReportContext) -> str:
    a = ctx.analysis
    cards = [
        _card("decode tokens/s", fmt(a.decode_tps, 1) + fmt_ci(a.decode_tps_ci, 1)),
        _card("time to first token", fmt(a.ttft_s, 3, "s") + fmt_ci(a.ttft_s_ci, 3, unit="s")),
        _card(
            "mean commit length (tokens/step)",
            fmt(a.mean_commit_len, 2) + fmt_ci(a.mean_commit_len_ci, 2),
        ),
        *([_card("per drafted step", d)] if (d := drafted_line(a)) else []),
        _card("mean step time", fmt_ms(a.mean_step_s) + fmt_ci(a.mean_step_s_ci, 1, 1e3, "ms")),
        _card("requests (errors)", f"{a.requests} ({a.errors})"),
    ]
    decomposition = ""
    if a.mean_commit_len and a.mean_step_s:
        decomposition = (
            f"<p>decode_tps = mean_commit_len / mean_step_time = {escape(fmt(a.mean_commit_len, 2))} / "
            f"{escape(fmt_ms(a.mean_step_s))} = {escape(fmt(a.mean_commit_len / a.mean_step_s, 1))} tokens/s"
            f" (commit length from {escape(a.commit_len_source or 'unknown')}"
            f"{'' if a.steps_reliable is not False else '; client-side steps unreliable'})</p>"
        )
    if a.speculation:
        decomposition += (
            f"<p>Speculation {escape(a.speculation)}: {escape(a.speculation_reason or '')}.</p>"
        )
    if a.interval_method:
        decomposition += details_block(
            "How the intervals were obtained", f"<p>{escape(a.interval_method)}.</p>"
        )
    if (reached := precision_line(a.precision)) is not None:
        decomposition += f"<p>Precision: {escape(reached)}.</p>"
    return f'<div class="headline">{"".join(cards)}</div>{decomposition}'


def _attribution(ctx: ReportContext) -> str:
    at = ctx.analysis.attribution
    if at is None:
        return "<p>No baseline given: pass <code>--baseline RUN_DIR</code> to split a gap into acceptance and step time.</p>"
    rows = [
        ("baseline run", at.baseline_run or "-"),
        ("tps ratio (baseline / observed)", fmt(at.tps_ratio, 3) + fmt_interval(at.tps_ratio_ci)),
        (
            "acceptance factor (L_B / L_O)",
            fmt(at.acceptance_factor, 3) + fmt_interval(at.acceptance_factor_ci),
        ),
        (
            "step-time factor (s_O / s_B)",
            fmt(at.step_time_factor, 3) + fmt_interval(at.step_time_factor_ci),
        ),
    ]
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return wide_block(f"<table>{body}</table>")


def details_block(summary: str, body: str) -> str:
    """A folded block: the statistics a reader opens on demand (`summary` is our own text)."""
    return f"<details><summary>{escape(summary)}</summary>{body}</details>"


def _verdict(ctx: ReportContext) -> str:
    """The verdict's sentences, first: the rate, what moved, the cause, the next step."""
    lines = verdict_lines(ctx.analysis)
    items = "".join(f"<li>{escape(s)}</li>" for s in lines)
    return f'<h2>Verdict</h2><ul class="verdict">{items}</ul>' if lines else ""


def _finding(a: Analysis, rank: int, f: Finding, plots: str) -> str:
    """One finding: heading (factor, cause), its sentence, the numbers that carry it and its
    next step; every evidence line, the test and the confidence in a <details>; then the plots
    that are its evidence (`plots`, from `_Plots.place`), so the reader sees them together."""
    ev = "".join(
        f"<tr><td>{escape(e.label)}</td><td>{escape(fmt_value(e.value))} {escape(e.unit)}</td><td>{escape(e.source)}</td></tr>"
        for e in f.evidence
    )
    heading = finding_heading(f)
    numbers = finding_numbers(f, test_of(a, f.id))
    table = wide_block(
        f"<table><tr><th>evidence</th><th>value</th><th>source</th></tr>{ev}</table>"
    )
    return (
        f'<div class="finding"><div><b>{rank}.</b> <span class="id">{escape(f.id)}</span>'
        + (f" &middot; {escape(heading)}" if heading else "")
        + f"</div><p>{escape(f.summary)}</p>"
        + (f'<p class="numbers">{escape(" · ".join(numbers))}</p>' if numbers else "")
        + f'<div class="next"><b>Next:</b> {escape(folded_next(f))}</div>'
        + details_block(
            f"evidence and test (confidence {fmt(f.confidence, 2)})",
            (table if ev else "")
            + (f"<p><b>Next, all of it:</b> {escape(f.next)}</p>" if f.next else ""),
        )
        + plots
        + "</div>"
    )


def _findings(ctx: ReportContext, plots: _Plots) -> str:
    a = ctx.analysis
    if not a.findings:
        return f"<p>No finding: {escape(a.no_finding_reason or '')}</p>"
    return "".join(
        _finding(a, rank, f, plots.place(SUPPORTS.get(f.id, ())))
        for rank, f in enumerate(a.findings, start=1)
    )


def wide_block(table: str) -> str:
    """A table in its own box: one wider than the page scrolls there, never the page."""
    return f'<div class="wide">{table}</div>'


def _rows_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return wide_block(f"<table><tr>{head}</tr>{body}</table>")


def _serving(ctx: ReportContext) -> str:
    s = ctx.analysis.serving
    if not s:
        return ""
    rows = latency_rows(s.get("run") or {})
    levels = level_rows(s)
    return (
        "<h2>Serving metrics</h2>"
        + (_rows_table(TABLE_HEADER, rows) if rows else "")
        + "<ul>"
        + "".join(f"<li>{escape(line)}</li>" for line in summary_lines(s))
        + "</ul>"
        + (_rows_table(LEVEL_HEADER, levels) if len(levels) > 1 else "")
    )


def _inline_md(text: str) -> str:
    """Glossary cells: escaped, then `code` and **bold** as tags (our own text, no markup in it)."""
    out = escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def _glossary() -> str:
    head = "".join(f"<th>{_inline_md(h)}</th>" for h in GLOSSARY_HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{_inline_md(c)}</td>" for c in t) + "</tr>" for t in GLOSSARY
    )
    return (
        '<footer class="glossary"><h2>Glossary: what each serving metric means, and its name '
        "in other tools</h2><p>With speculative decoding one streamed chunk carries a whole "
        "verify step (several tokens), so a per-chunk ITL is a per-step latency and reads "
        "commit-length times a per-token ITL.</p>"
        f"{wide_block(f'<table><tr>{head}</tr>{body}</table>')}</footer>"
    )


def _plan(ctx: ReportContext) -> str:
    if not ctx.plan:
        return ""
    rows = "".join(
        f"<tr><td>{escape(s.get('tag'))}</td><td>{escape(s.get('prompt_tokens'))}</td>"
        f"<td>{escape(s.get('max_tokens'))}</td><td>{escape(s.get('repeat'))}</td>"
        f"<td>{escape(s.get('concurrency'))}</td></tr>"
        for s in ctx.plan.get("steps", [])
    )
    skipped = "".join(
        f"<li>{escape(s.get('tag'))}: {escape(s.get('reason'))}</li>"
        for s in ctx.plan.get("skipped", [])
    )
    notes = "".join(f"<li>{escape(n)}</li>" for n in ctx.plan.get("notes", []))
    return (
        "<h2>What was sent</h2>"
        + wide_block(
            "<table><tr><th>experiment</th><th>prompt tokens</th>"
            f"<th>max tokens</th><th>repeat</th><th>concurrency</th></tr>{rows}</table>"
        )
        + (f"<p>Skipped:</p><ul>{skipped}</ul>" if skipped else "")
        + (f"<ul>{notes}</ul>" if notes else "")
    )


def _errors(ctx: ReportContext) -> str:
    if not ctx.errors:
        return ""
    shown = ctx.errors[:50]
    rows = "".join(
        f"<tr><td>{e.index}</td><td>{escape(e.tag)}</td><td>{escape(e.kind)}</td><td class='msg'>{escape(e.message)}</td></tr>"
        for e in shown
    )
    more = (
        f"<p>... and {len(ctx.errors) - len(shown)} more.</p>"
        if len(ctx.errors) > len(shown)
        else ""
    )
    return (
        "<h2>Errors</h2>"
        + wide_block(
            "<table><tr><th>request</th><th>experiment</th><th>kind</th>"
            f"<th>message</th></tr>{rows}</table>"
        )
        + more
    )


def _plot_div(plot: Plot) -> str:
    """One drawn plot: its div, the sentence under it and the script that draws it."""
    div_id = f"plot-{plot.spec.key}"
    payload = safe_json(plot.fig.to_json())
    return (
        f'<div class="plot"><div id="{div_id}" class="plotly-graph-div"></div>'
        f'<p class="explains">{escape(plot.spec.explains)}</p>'
        f'<script type="text/javascript">(function(){{var f={payload};'
        f'Plotly.newPlot("{div_id}",f.data,f.layout,{{responsive:true,displaylogo:false}});}})();</script></div>'
    )


# Plots that only some runs can have (a baseline, a concurrency sweep): their absence is not
# news, so the not-drawn line leaves them out.
_OPTIONAL = frozenset({"baseline_vs_observed", "breakeven", "concurrency"})


class _Plots:
    """The run's plots, each drawn once: where it is first asked for, linked wherever a later
    section asks for it again; what is left goes to the end with one line for the undrawn."""

    def __init__(self, analysis: Analysis) -> None:
        self.all = build_figures(analysis)
        self.drawn = {p.spec.key: p for p in self.all if p.fig is not None}
        self.placed: set[str] = set()

    def place(self, keys: tuple[str, ...] | list[str]) -> str:
        divs, links = [], []
        for key in keys:
            if (plot := self.drawn.get(key)) is None:
                continue
            if key in self.placed:
                links.append(f'<a href="#plot-{key}">{escape(plot.spec.title)}</a>')
            else:
                self.placed.add(key)
                divs.append(_plot_div(plot))
        # the columns are fixed before any plot is drawn: plotly sizes a plot to its box once,
        # when its script runs, and a grid that gained a column later would leave it too wide
        grid = "plots two" if len(divs) > 1 else "plots"
        out = f'<div class="{grid}">{"".join(divs)}</div>' if divs else ""
        return out + (
            f'<p class="explains">Plotted above: {", ".join(links)}.</p>' if links else ""
        )

    def rest(self) -> str:
        """The plots no section placed, then one line naming those not drawn and why."""
        body = self.place([p.spec.key for p in self.all if p.spec.key not in self.placed])
        missing = [
            p.spec.title
            for p in self.all
            if p.why_not == "not measured" and p.spec.key not in _OPTIONAL
        ]
        single = [p.spec.title for p in self.all if p.why_not == "one point"]
        line = " ".join(
            [
                *([f"Not measured in this run. No plot: {'; '.join(missing)}."] if missing else []),
                *([f"One point only, no plot: {'; '.join(single)}."] if single else []),
            ]
        )
        return body + (f'<p class="nodata">{escape(line)}</p>' if line else "")


@functools.cache
def plotly_bundle() -> str:
    """The vendored basic plotly.js (vendor/README.md), read once per process."""
    path = resources.files("specscope.report").joinpath("vendor", "plotly-basic.min.js")
    return path.read_text(encoding="utf-8")


def _sections(ctx: ReportContext) -> str:
    """The body after the title, in reading order; the plots are placed as the sections ask
    for them (`_Plots`), so the order of these calls is the order on the page."""
    a, info = ctx.analysis, ctx.info
    plots = _Plots(a)
    notes = "".join(f"<li>{escape(n)}</li>" for n in [*a.notes, *info.notes])
    out = _verdict(ctx) + f"<h2>Headline</h2>{_headline(ctx)}"
    out += plots.place(LEAD)
    out += f"<h2>Attribution</h2>{_attribution(ctx)}" + plots.place(BESIDE_ATTRIBUTION)
    out += _serving(ctx)
    out += f"<h2>Findings</h2>{_findings(ctx, plots)}"
    if notes:
        fold = details_block("Claims tested and not reported, and notes", f"<ul>{notes}</ul>")
        out += f"<h2>Notes</h2>{fold}"
    if rest := plots.rest():
        out += f"<h2>Other plots</h2>{rest}"
    return out + _plan(ctx) + _errors(ctx) + _glossary()


def render_html(ctx: ReportContext) -> str:
    a, info = ctx.analysis, ctx.info
    title = f"specscope diagnosis — {info.model or info.endpoint or info.run_id}"
    partial = ""
    if ctx.partial:
        partial = (
            f'<div class="partial"><b>Partial run.</b> {escape(ctx.status_line)}. '
            "The numbers below cover only what was measured before it stopped.</div>"
        )
    meta = (
        f"run <code>{escape(info.run_id)}</code> &middot; endpoint <code>{escape(info.endpoint)}</code> "
        f"&middot; flavor {escape(info.flavor or '-')} &middot; model {escape(info.model or '-')} "
        f"&middot; status {escape(info.status)}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{PAGE_CSS}</style>"
        f'<script type="text/javascript">{plotly_bundle()}</script></head><body>'
        f'<h1>{escape(title)}</h1><div class="meta">{meta}</div>{partial}'
        + _sections(ctx)
        + f'<p class="meta">analysis: {escape(json.dumps({"schema": a.schema_}))} &middot; specscope '
        f"{escape(info.tool_version)}</p></body></html>\n"
    )


def write_page(page: str, path: Path) -> Path:
    """Write a page whole or not at all (a temporary file, then renamed over `path`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path


def write_html(ctx: ReportContext, path: Path) -> Path:
    return write_page(render_html(ctx), path)
