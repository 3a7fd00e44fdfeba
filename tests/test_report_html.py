"""The HTML report: self-contained, every plot present, every server string escaped."""

from __future__ import annotations

from html.parser import HTMLParser

from specscope.analysis.result import Analysis
from specscope.report import ReportContext, render_html, render_markdown
from specscope.report.context import RequestError
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
