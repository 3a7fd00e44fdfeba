"""The terminal report (report/terminal.py) reads verdict first and folds its statistics: the
verdict in the first 10 lines, the whole default report within 60 lines at 100 columns, each
finding by the few numbers that carry it in human units; `--verbose` shows every test (p, q,
method) and note, in `report` as in `diagnose`."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from specscope.analysis.result import Evidence, Finding, FindingTest
from specscope.cli import app
from specscope.report import context_from_run, render_terminal
from specscope.report.context import finding_heading, finding_numbers
from specscope.store.analyses import analyze_run, load_analysis
from support.reports import story_run

RECORDED = Path(__file__).parent / "fixtures" / "recorded" / "clean-plain-loaded"
WIDTH, VERDICT_LINES, MAX_LINES = 100, 10, 60


def _rendered(run, analysis, verbose: bool = False) -> list[str]:
    console = Console(record=True, width=WIDTH, color_system=None, file=io.StringIO())
    render_terminal(context_from_run(run, analysis), console, verbose=verbose)
    return console.export_text().splitlines()


@pytest.fixture(scope="module")
def recorded():
    return load_analysis(RECORDED)


@pytest.fixture(scope="module")
def story():
    """The seed story's regression replayed on the twin's clock (no server)."""
    run = story_run("seed-regression", 2)
    return run, analyze_run(run)


@pytest.mark.parametrize("which", ["recorded", "story"])
def test_the_verdict_comes_first_and_the_report_fits_a_screen(which, request):
    run, analysis = request.getfixturevalue(which)
    lines = _rendered(run, analysis)
    head = "\n".join(lines[:VERDICT_LINES])
    assert "Decode runs at" in head and " tokens per step / " in head  # the rate and its split
    assert "Against the two-point window" in head and head.count("×") >= 2  # both multiples
    assert "Top " in head and "Next: " in head  # the top finding or cause, the next step
    assert len(lines) <= MAX_LINES, "\n".join(lines)
    folded = "\n".join(lines)
    # tests, p, q and method prose are folded; confidence ranks nothing in the default view
    for hidden in ("p (one-sided)", "q (Benjamini", "confidence", "note: no ", "[significance"):
        assert hidden not in folded
    assert "--verbose" in folded  # and the reader is told where they went


def test_verbose_shows_every_test_and_note(recorded):
    run, analysis = recorded
    text = "\n".join(_rendered(run, analysis, verbose=True))
    assert analysis.findings and analysis.notes
    assert "p (one-sided)" in text and "q (Benjamini-Hochberg" in text
    assert "confidence" in text and "intervals" in text
    for t in analysis.finding_tests:
        if not t.reported:
            assert f"note: no {t.id}:" in text  # every claim tested and not reported
    assert text.index("Decode runs at") < text.index("what was measured")  # verdict first too


def test_a_finding_is_folded_to_its_numbers_in_human_units():
    f = Finding(
        id="step_time_drift",
        summary="Step time grows.",
        factor=1.68,
        candidates=["host_per_token", "kv_layout"],
        evidence=[
            Evidence(label="drift slope", value=5.98e-06, unit="s/token"),
            Evidence(label="drift slope 95% CI low", value=5.33e-06, unit="s/token"),
            Evidence(label="drift slope 95% CI high", value=6.63e-06, unit="s/token"),
            Evidence(label="drift over the generation", value=0.002374, unit="s"),
            Evidence(label="per-step noise sd", value=0.0007, unit="s"),
            Evidence(label="p (one-sided)", value=1e-18, source="significance test"),
        ],
    )
    t = FindingTest(
        id="step_time_drift",
        method="robust fit",
        effect=0.7341,
        ci=[0.6507, 0.8174],
        p=1e-18,
        q=1e-17,
        min_effect=0.1,
        unit="fraction of the mean step",
        reported=True,
        outcome="reported",
    )
    # three numbers carry it: its factor (in the heading), the effect and the first figure
    assert finding_numbers(f, t) == [
        "effect 73% (95% CI 65% to 82%)",
        "drift slope 5.98 ms per 1000 tokens (95% CI 5.33–6.63)",
    ]
    assert finding_heading(f) == "factor 1.68× · cause undecided: host_per_token or kv_layout"
    # without a factor, two figures: times in ms (seconds above one), intervals beside them
    no_factor = f.model_copy(update={"factor": None})
    assert finding_numbers(no_factor, t)[2] == "drift over the generation 2.37 ms"
    e2e = Evidence(label="e2e p50", value=46.0, unit="s")
    assert finding_numbers(no_factor.model_copy(update={"evidence": [e2e]}), None) == [
        "e2e p50 46.00 s"
    ]
    ratio = t.model_copy(update={"unit": "x", "effect": 0.87, "ci": [0.5, 1.2]})
    assert finding_numbers(f.model_copy(update={"evidence": []}), ratio) == [
        "effect 1.87× (95% CI 1.50–2.20×)"
    ]


def test_report_has_verbose_too(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(RECORDED, run_dir)
    runner = CliRunner()
    args = ["report", str(run_dir), "--html", str(tmp_path / "r.html")]
    folded = runner.invoke(app, args)
    verbose = runner.invoke(app, [*args, "--verbose"])
    assert folded.exit_code == 0 and verbose.exit_code == 0, folded.output + verbose.output
    assert folded.stdout.lstrip().startswith("specscope diagnosis")
    assert "p (one-sided)" not in folded.stdout and "p (one-sided)" in verbose.stdout
    assert len(verbose.stdout.splitlines()) > len(folded.stdout.splitlines())


def test_against_a_baseline_one_split_and_nothing_without_data_behind_it():
    """The baseline split once, each factor beside its interval; a breakeven axis no sweep
    measured and a recommendation with no sweep to stand on are --verbose's only."""
    base, obs = story_run("healthy", 1), story_run("seed-regression", 2)
    analysis = analyze_run(obs, baseline=base)
    be = analysis.breakeven
    assert be is not None and be["concurrency"] is None  # the story has no concurrency sweep
    lines = _rendered(obs, analysis)
    text = "\n".join(lines)
    assert len(lines) <= MAX_LINES, text
    assert "breakeven concurrency" not in text and "Not enough sweep data" not in text
    assert text.count("tps ratio") == 1
    flat = " ".join(line.strip(" │") for line in lines)  # the panel wraps its rows
    assert re.search(
        r"tps ratio [\d.]+ \(95% CI [\d.]+–[\d.]+\) = acceptance [\d.]+ \(95% CI", flat
    )
    verbose = "\n".join(_rendered(obs, analysis, verbose=True))
    assert "breakeven concurrency" in verbose and "needs a concurrency sweep" in verbose
