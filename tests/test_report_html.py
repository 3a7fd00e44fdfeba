"""The HTML report: self-contained, every plot present, every server string escaped."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from html.parser import HTMLParser
from pathlib import Path

import plotly.offline

import specscope.report
from specscope.analysis.diagnosis.cards import CARDS
from specscope.analysis.result import Analysis
from specscope.report import ReportContext, render_html, render_markdown
from specscope.report.context import RequestError
from specscope.report.figures import BESIDE_ATTRIBUTION, FIGURES, LEAD, SUPPORTS
from specscope.report.html import plotly_bundle
from support.reports import HOSTILE, HOSTILE_ERROR, PLOT_KEYS, full_analysis, hostile_info


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.scripts: list[str] = []
        self.script_srcs: list[str] = []
        self.links: list[str] = []
        self._in_script = False
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "script":
            self._in_script = True
            self.scripts.append("")
            if a.get("src"):
                self.script_srcs.append(a["src"])
        if tag in ("link", "img", "iframe") and (a.get("href") or a.get("src")):
            self.links.append(a.get("href") or a.get("src"))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        else:
            self.text.append(data)


def _ctx(partial: bool = False) -> ReportContext:
    return ReportContext(
        analysis=full_analysis(partial),
        info=hostile_info("partial" if partial else "complete"),
        run_dir="/tmp/run",
        errors=[RequestError(3, "full_generation", "stream_truncated", HOSTILE_ERROR)],
        plan={
            "steps": [
                {
                    "tag": "full_generation",
                    "prompt_tokens": 2700,
                    "max_tokens": 1500,
                    "repeat": 1,
                    "concurrency": 1,
                }
            ],
            "skipped": [{"tag": "context_sweep:40000", "reason": "exceeds context"}],
            "notes": [],
        },
    )


def test_every_plot_is_rendered_and_self_contained():
    page = render_html(_ctx())
    p = _Collector()
    p.feed(page)
    for key in PLOT_KEYS:
        assert f"plot-{key}" in p.ids, key
        assert any(f'Plotly.newPlot("plot-{key}"' in s for s in p.scripts), key
    # plotly.js inlined once; nothing fetched at view time
    assert sum("Plotly" in s and len(s) > 1_000_000 for s in p.scripts) == 1
    assert p.script_srcs == [] and p.links == []


def test_server_strings_are_escaped_everywhere():
    page = render_html(_ctx())
    assert HOSTILE not in page
    assert "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    p = _Collector()
    p.feed(page)
    # the parser sees exactly our scripts: bundle + one per plot (no injected one)
    assert len(p.scripts) == 1 + len(PLOT_KEYS)
    text = "".join(p.text)
    assert HOSTILE in text  # shown to the reader as text, literally
    assert HOSTILE_ERROR in text


def test_the_verdict_comes_first_and_the_statistics_fold_into_details():
    page = render_html(_ctx())
    assert page.index("<h2>Verdict</h2>") < page.index("<h2>Headline</h2>")
    assert "Decode runs at 32.7 tokens/s" in page
    # each finding shows its sentence and next step; its evidence table sits in a <details>
    finding = page[page.index('<div class="finding">') :]
    assert finding.index("<details>") < finding.index("<th>evidence</th>")
    assert finding.index("Next:") < finding.index("<details>")
    md = render_markdown(_ctx())
    assert md.index("## Verdict") < md.index("## Headline")
    assert "<details>" in md and "- first 200 tokens: 5" in md  # the evidence, folded


def test_partial_run_says_so():
    page = render_html(_ctx(partial=True))
    assert "Partial run." in page and "Ctrl-C" in page
    assert "Partial run." not in render_html(_ctx())


def test_missing_series_say_not_measured_without_crashing():
    ctx = ReportContext(
        analysis=Analysis(
            decode_tps=None, requests=0, series={"commit_len_histogram": {"commit_len": "junk"}}
        ),
        info=hostile_info(),
    )
    page = render_html(ctx)
    assert "Not measured in this run." in page
    assert 'Plotly.newPlot("plot-' not in page
    assert "No finding:" in page


def test_markdown_escapes_and_lists_findings():
    md = render_markdown(_ctx(partial=True))
    assert HOSTILE not in md and "\\<script\\>" in md
    assert "**acceptance_decay**" in md and "**step_time_drift**" in md
    assert "Partial run" in md
    assert "acceptance factor 1.720" in md


def test_a_full_report_is_at_most_one_and_a_half_megabytes():
    """#36: the report was 4.9 MB, 4.8 MB of it the full plotly.js; with the basic bundle a
    report with every plot drawn stays under 1.5 MB."""
    size = len(render_html(_ctx()).encode("utf-8"))
    assert size <= 1_500_000, size


def _version(header: str) -> str:
    m = re.search(r"plotly\.js[^\n]* v(\d+\.\d+\.\d+)", header)
    assert m, header[:200]
    return m.group(1)


def test_the_vendored_bundle_is_the_plotly_js_that_plotly_ships_and_installs():
    """The figures' JSON is written by Python `plotly` for its own plotly.js version: the basic
    bundle must be that version (vendor/README.md says how to update it with the pin), and it
    must install with the package (package data), licence beside it."""
    basic = plotly_bundle()[:300]
    assert "basic" in basic and "MIT license" in basic
    assert _version(basic) == _version(plotly.offline.get_plotlyjs()[:300])
    vendor = Path(specscope.report.__file__).parent / "vendor"
    assert "MIT License" in (vendor / "plotly-basic.LICENSE").read_text()
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["specscope"]
    assert any(fnmatch("report/vendor/plotly-basic.min.js", p) for p in patterns)


def _plot_ids(page: str) -> list[str]:
    return re.findall(r'<div id="plot-([a-z_]+)" class="plotly-graph-div">', page)


def test_lead_plots_come_first_and_the_rest_sit_beside_what_they_support():
    """Step time and commit length along the generation right after the headline; the
    baseline's plot under the attribution; a finding's plots inside it; each plot drawn once."""
    page = render_html(_ctx())
    ids = _plot_ids(page)
    assert ids[:2] == list(LEAD) and len(ids) == len(set(ids)) == len(PLOT_KEYS)
    lead_end = page.index("<h2>Attribution</h2>")
    assert (
        page.index("<h2>Headline</h2>") < page.index('id="plot-step_time_by_position"') < lead_end
    )
    assert lead_end < page.index('id="plot-baseline_vs_observed"') < page.index("<h2>Findings</h2>")
    drift = page.index('<span class="id">step_time_drift</span>')
    assert drift < page.index('id="plot-tps_by_output_len"') < page.index("<h2>", drift)
    # acceptance_decay's plot is the lead's: linked, not drawn again
    decay = page.index('<span class="id">acceptance_decay</span>')
    assert 'href="#plot-commit_len_by_position"' in page[decay:drift]
    # a plot no finding of the run claims: at the end, under its own heading
    assert page.index("<h2>Other plots</h2>") < page.index('id="plot-commit_len_histogram"')


def test_a_plot_of_one_point_is_not_drawn_and_one_line_says_so():
    a = full_analysis()
    a.series["tps_by_output_len"] = {"max_tokens": [375], "decode_tps": [90]}
    a.series["tps_by_context"] = {"context": [256, 1350], "decode_tps": [None, 130]}
    del a.series["two_point_vs_full"]
    page = render_html(ReportContext(analysis=a, info=hostile_info()))
    ids = _plot_ids(page)
    assert "tps_by_output_len" not in ids and "tps_by_context" not in ids
    assert "two_point_vs_full" not in ids and "commit_len_histogram" in ids
    nodata = re.findall(r'<p class="nodata">([^<]*)</p>', page)
    assert len(nodata) == 1, nodata
    assert "Decode rate vs generation length" in nodata[0] and "Decode rate vs context" in nodata[0]
    assert "Two-point vs full generation" in nodata[0]


def test_every_finding_plot_key_names_a_card_and_a_figure():
    """The placement tables (figures.py) name real finding ids and real plots."""
    plots = {spec.key for spec, _ in FIGURES}
    assert set(SUPPORTS) <= {c.id for c in CARDS}
    assert {k for keys in SUPPORTS.values() for k in keys} | set(LEAD) | set(
        BESIDE_ATTRIBUTION
    ) <= plots
