"""The HTML report opened in a real headless Chromium: the plots render (plotly draws its
`.main-svg` elements) and no injected script runs. Skipped only where Chromium is absent."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from specscope.report import ReportContext, write_html
from support.diagnose import diagnose_json
from support.reports import PLOT_KEYS, full_analysis, hostile_info

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="/usr/bin/chromium not installed "
        "(Debian package `chromium`; `make test` installs it)",
    ),
]


def _dump_dom(page: Path, profile: Path) -> str:
    """The DOM after scripts ran; fails on a JavaScript error logged to the console."""
    argv = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=15000",
        "--dump-dom",
        page.as_uri(),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    js_errors = [
        line
        for line in proc.stderr.splitlines()
        if "Uncaught" in line or ("CONSOLE" in line and "error" in line.lower())
    ]
    assert not js_errors, js_errors
    return proc.stdout


def test_plots_render_in_headless_chromium(tmp_path):
    page = write_html(
        ReportContext(analysis=full_analysis(), info=hostile_info()), tmp_path / "report.html"
    )
    dom = _dump_dom(page, tmp_path / "profile")
    # One plotly figure per plot div; each figure draws at least one .main-svg.
    assert dom.count('class="main-svg"') >= len(PLOT_KEYS), dom[:2000]
    for key in PLOT_KEYS:
        assert f'id="plot-{key}"' in dom
    # The hostile model name is shown as text, never executed or parsed as a tag.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "<script>alert(1)</script>" not in dom


def test_a_real_diagnosis_report_renders(twin_server, tmp_path):
    """The report a real `specscope diagnose` run wrote (twin behind HTTP), not a hand-made one."""
    srv = twin_server("healthy", time_scale=1.0)
    obj, proc = diagnose_json(
        srv.url,
        tmp_path / "run",
        "--quick",
        "--prompt-tokens",
        "256",
        "--max-tokens",
        "300",
        "--budget-s",
        "6",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = Path(obj["run_dir"]) / "report.html"
    plots = page.read_text().count('Plotly.newPlot("plot-')
    assert plots >= 4
    dom = _dump_dom(page, tmp_path / "profile")
    assert dom.count('class="main-svg"') >= plots
