"""Speculation's speedup per window (issue #40 scope 1, docs/watch.md): commit length x plain
step time / speculative step time against a recorded plain run, with an interval, and whether
it is below 1. Checked on virtual time against what the twin's scenarios imply (their expected
commit length and step time, twin.scenario.per_request_rate), and end to end: a recorded probe
of the twin's `speculation-overhead:baseline` (the same server without speculation) as
`--plain-baseline`, then a live watch of `speculation-overhead`, whose speculation does not pay.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specscope.analysis.watch.sample import CanarySample, sample_from_steps
from specscope.analysis.watch.speedup import PlainReferenceError, plain_reference, speedup
from specscope.analysis.watch.window import Z95, window_figures
from specscope.twin.scenario import Scenario, load_scenario, per_request_rate, simulate_request
from specscope.watch.baseline import BaselineError, plain_from_run, references
from support.twin_truth import delivered_slowdown
from test_watch_report import report, timeline_of

SRC = Path(__file__).resolve().parents[1] / "src"
PROMPT, OUTPUT = 512, 256


def _canaries(sc: Scenario, n: int, seed0: int = 0) -> list[CanarySample]:
    out = []
    for i in range(n):
        s = sample_from_steps(float(i), list(simulate_request(sc, PROMPT, OUTPUT, seed0 + i)))
        assert s is not None
        out.append(s)
    return out


def _plain(sc: Scenario) -> Scenario:
    """The scenario without speculation (its [baseline] table where it has one)."""
    if sc.baseline:
        return sc.variant("baseline")
    return sc.model_copy(
        update={
            "acceptance": sc.acceptance.model_copy(update={"depth_probs": [], "verify_width": 0})
        }
    )


def _implied(sc: Scenario) -> float:
    """The speedup the scenario implies at the canary's mean context (midway through it)."""
    context = PROMPT + OUTPUT / 2
    return per_request_rate(sc, 1, context) / per_request_rate(_plain(sc), 1, context)


@pytest.mark.parametrize(("name", "pays"), [("healthy", True), ("speculation-overhead", False)])
def test_the_speedup_is_what_the_scenario_implies(name: str, pays: bool):
    sc = load_scenario(name)
    implied = _implied(sc)
    assert (implied > 1) is pays  # the scenarios say so; the watch must read it back
    plain = plain_reference(_canaries(_plain(sc), 6, seed0=100), source="plain-run")
    assert plain.commit_len == pytest.approx(1.0)
    covered = 0
    for window in range(6):  # six windows of two canaries each
        got = speedup(window_figures(_canaries(sc, 2, seed0=10 * window)), plain)
        assert got is not None
        assert got.value == pytest.approx(implied, rel=0.1)
        assert got.ci[0] < got.value < got.ci[1]
        covered += got.ci[0] < implied < got.ci[1]
        assert got.pays is pays
    assert covered >= 5  # a 95% interval: the truth inside nearly every time


def test_the_interval_carries_both_sides_in_quadrature_and_can_straddle_one():
    sc = load_scenario("healthy")
    window = window_figures(_canaries(sc, 2))
    plain = plain_reference(_canaries(_plain(sc), 6, seed0=100), source="p")
    assert window.decode_tps is not None and window.decode_tps_ci is not None
    rel_window = math.log(window.decode_tps_ci[1] / window.decode_tps) / Z95
    for widen in (1.0, 30.0):  # the plain run as measured, and thirty times less precise
        step, (lo, hi) = plain.step_s, plain.step_s_ci
        ci = (step - widen * (step - lo), step + widen * (hi - step))
        got = speedup(window, dataclasses.replace(plain, step_s_ci=ci))
        assert got is not None and got.value == pytest.approx(window.decode_tps * step)
        rel_plain = (ci[1] - ci[0]) / (2 * Z95 * step)
        half = math.log(got.ci[1] / got.ci[0]) / 2
        assert half == pytest.approx(Z95 * math.hypot(rel_window, rel_plain))
    # a plain step that makes the speedup 1, its interval across 1: it cannot tell
    even = step / got.value
    tie = speedup(
        window, dataclasses.replace(plain, step_s=even, step_s_ci=(0.9 * even, 1.1 * even))
    )
    assert tie is not None and tie.value == pytest.approx(1.0) and tie.pays is None


def test_no_reliable_canary_no_speedup_and_a_speculating_run_is_no_plain_reference():
    sc = load_scenario("healthy")
    plain = plain_reference(_canaries(_plain(sc), 6), source="p")
    unreliable = [dataclasses.replace(c, reliable=False) for c in _canaries(sc, 2)]
    assert speedup(window_figures(unreliable), plain) is None
    assert speedup(window_figures([]), plain) is None
    with pytest.raises(PlainReferenceError, match="it speculated"):
        plain_reference(_canaries(sc, 6), source="s")
    with pytest.raises(PlainReferenceError, match="at least 5"):
        plain_reference(_canaries(_plain(sc), 3), source="s")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC)}


def _probe(url: str, out: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "specscope.cli", "probe", url, "--prompt-tokens", str(PROMPT),
         "--max-tokens", str(OUTPUT), "--repeat", "6", "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=120, env=_env(), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-1000:]


@pytest.mark.timeout(420)
def test_a_live_watch_reads_the_speedup_against_a_recorded_plain_run(tmp_path, twin_server):
    """speculation-overhead at half its time: the recorded plain run, then a 30 s watch. Not
    faster. The speedup the watch must read is the one the twin delivered: the scenario's,
    times how much slower than scheduled the twin ran its plain steps during the plain run,
    over how much slower it ran the speculative steps of each window's canaries (a window's
    canaries began up to an interval before it)."""
    sc = load_scenario("speculation-overhead")
    plain_twin = twin_server("speculation-overhead:baseline", time_scale=0.5)
    _probe(plain_twin.url, tmp_path / "plain")
    plain_slowdown = delivered_slowdown(plain_twin.backend, -math.inf, math.inf)
    assert plain_slowdown is not None, "the plain twin kept no finished request"
    spec_twin = twin_server("speculation-overhead", time_scale=0.5)
    url = spec_twin.url
    done = subprocess.run(
        [sys.executable, "-m", "specscope.cli", "watch", url, "--probe-every", "1",
         "--interval", "6", "--warmup", "6", "--duration", "30", "--plain-baseline",
         str(tmp_path / "plain"), "--out", str(tmp_path / "watch"), "--json"],
        capture_output=True, text=True, timeout=150, env=_env(), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]
    start = events[0]
    assert start["plain_baseline"]["source"] == str(tmp_path / "plain")
    measured = [e for e in events if e["event"] == "window" and e["speedup"] is not None]
    assert len(measured) >= 2
    implied = _implied(sc)
    for w in measured:
        spec_slowdown = delivered_slowdown(spec_twin.backend, w["start"] - 6, w["end"])
        assert spec_slowdown is not None, w  # a window with a speedup had canaries, so steps
        delivered = implied * plain_slowdown / spec_slowdown
        figures = (w["speedup"], implied, plain_slowdown, spec_slowdown)
        print(f"\nspeedup read, implied, plain and speculative twin slowdowns: {figures}")
        assert 0.8 * delivered < w["speedup"] < 1.25 * delivered, figures
        assert w["speedup_ci"][0] < w["speedup"] < w["speedup_ci"][1] < 1.0
        assert w["speculation_pays"] is False and w["speculation"] == "on"
    windows = [e for e in events if e["event"] == "window"]
    summary = events[-1]
    assert summary["event"] == "summary"  # every canary that ended is in a window, the last too
    assert sum(w["canaries"] + w["canary_errors"] for w in windows) == summary["canaries"]
    kept = [json.loads(x) for x in (tmp_path / "watch" / "windows.jsonl").read_text().splitlines()]
    assert [w["speedup"] for w in kept] == [e["speedup"] for e in events if e["event"] == "window"]
    # the run directory re-renders as the watch's timeline, the speedup its last row
    rendered = report(tmp_path / "watch")
    assert rendered.returncode == 0, rendered.stderr
    fig = timeline_of((tmp_path / "watch" / "report.html").read_text(encoding="utf-8"))
    rows = [t for t in fig["data"] if t.get("mode") == "lines+markers"]
    assert len(rows) == 4 and rows[3]["y"] == [w["speedup"] for w in measured]
    # the same plain run given as --baseline is recognised as plain: the speedup's reference,
    # and the detector learns from the warm-up
    base, plain = references(tmp_path / "plain", None)
    assert base is None and plain is not None and plain.commit_len == pytest.approx(1.0)
    with pytest.raises(BaselineError, match="give the plain run once"):
        references(tmp_path / "plain", tmp_path / "plain")
    with pytest.raises(BaselineError, match="not a specscope run directory"):
        plain_from_run(tmp_path)


def test_a_speculating_run_as_plain_baseline_is_one_line_and_exit_2(tmp_path, twin_server):
    url = twin_server("healthy", time_scale=0.05).url
    _probe(url, tmp_path / "spec")
    done = subprocess.run(
        [sys.executable, "-m", "specscope.cli", "watch", url, "--plain-baseline",
         str(tmp_path / "spec"), "--duration", "1"],
        capture_output=True, text=True, timeout=60, env=_env(), check=False,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "it speculated" in lines[0], done.stderr


def test_the_terminal_line_says_whether_speculation_pays():
    from rich.console import Console

    from specscope.analysis.watch.events import Window
    from specscope.analysis.watch.speedup import Speedup
    from specscope.analysis.watch.window import EMPTY
    from specscope.report.watch_terminal import WatchView

    console = Console(record=True, width=300)
    view = WatchView(console)
    for gain in (Speedup(0.6, (0.55, 0.65), False), Speedup(3.9, (3.6, 4.2), True), None):
        view.render(Window(1.0, 0.0, 1.0, "watching", EMPTY, 0, "on", "r", None, {}, None, gain))
    lines = console.export_text().splitlines()
    assert "speedup x0.60 [0.55, 0.65]: speculation is not paying" in lines[0]
    assert "speedup x3.90 [3.60, 4.20]: pays" in lines[1]
    assert "speedup" not in lines[2]
