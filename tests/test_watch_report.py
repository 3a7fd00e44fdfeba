"""`specscope report RUN_DIR` on a watch's run directory (docs/watch.md): the HTML page with a
timeline of every window (decode rate, commit length, step time with their intervals; the
speedup when a plain reference was given), the alerts and recorded faults marked on it, the
alerts' text, the start and the summary; everything read from the files escaped (a hostile
server message stays text). The run directory is written by the watch's own writer
(watch/rundir.py) from real events; tests/test_watch_speedup.py renders one a live watch wrote.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from specscope.analysis.watch.detector import Alert, Recovery
from specscope.analysis.watch.events import Start, Summary, WatchError, Window
from specscope.analysis.watch.sample import sample_from_steps
from specscope.analysis.watch.speedup import Speedup
from specscope.analysis.watch.window import EMPTY, window_figures
from specscope.report.watch_events import alert_json
from specscope.twin.scenario import load_scenario, simulate_request
from specscope.watch.rundir import WatchRunDir

SRC = Path(__file__).resolve().parents[1] / "src"
HOSTILE = "</script><img src=x onerror=alert(2)>"
T0 = 1_790_000_000.0


def _window(i: int, sc_name: str, gain: Speedup | None) -> Window:
    sc = load_scenario(sc_name)
    samples = [
        s
        for seed in (2 * i, 2 * i + 1)
        if (s := sample_from_steps(T0 + 10 * i, list(simulate_request(sc, 512, 256, seed))))
    ]
    figures = window_figures(samples) if i != 3 else EMPTY  # one window with no canary
    t = T0 + 10 * (i + 1)
    cusum = {"commit_len": (0.0, 9.0), "step_time": (min(9.5, 2.0 * max(0, i - 4)), 9.0)}
    return Window(t, t - 10, t, "watching", figures, 0, "on", "r", None, cusum, None, gain)


def write_watch_run(path: Path) -> tuple[int, Alert]:
    """A watch of 10 windows, healthy then seed-regression from the sixth, an alert on it, a
    canary error with a hostile message, a recovery and a summary: the number of windows."""
    run = WatchRunDir(path, {"url": "http://127.0.0.1:9/<b>x</b>", "probe_every_s": 10.0,
                             "interval_s": 10.0, "prompt_tokens": 512, "max_tokens": 256,
                             "false_alarms_per_day": 0.1})  # fmt: skip
    run.write(Start(T0, "http://127.0.0.1:9/<b>x</b>", 10.0, 10.0, 512, 256, 276480, 60.0,
                    "warm-up", 0.1, 1.1))  # fmt: skip
    alert = Alert("step_time", 1.49, (1.44, 1.55), T0 + 60, T0 + 70, None,
                  ("host_per_token", "kv_layout"), "step time grows along each canary", 2, 9.5, 9.0)  # fmt: skip
    for i in range(10):
        gain = Speedup(3.8 - 0.2 * (i >= 5), (3.5, 4.1), True) if i != 3 else None
        run.write(_window(i, "healthy" if i < 5 else "seed-regression", gain))
        if i == 6:
            run.write(alert)
        if i == 7:
            run.write(WatchError(T0 + 78, "canary", "http_500", HOSTILE))
    run.write(Recovery("step_time", T0 + 200))
    run.write(Summary(T0 + 101, T0, 10, 20, 1, 1, [alert_json(alert)], False, str(path)))
    run.close()
    return 10, alert


def report(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specscope.cli", "report", str(path), *extra],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )  # fmt: skip


def timeline_of(page: str) -> dict:
    """The timeline figure's JSON, as the page hands it to plotly."""
    div = page.find('<div id="plot-watch-timeline"')
    assert div > 0, "no timeline plot"
    found = re.search(r'var f=(\{.*?\});Plotly\.newPlot\("plot-watch-timeline"', page[div:], re.S)
    assert found, "no timeline script"
    return json.loads(found.group(1).replace("<\\/", "</"))


def test_a_watch_run_renders_its_timeline_alerts_and_faults_escaped(tmp_path: Path):
    n, alert = write_watch_run(tmp_path / "w")
    done = report(tmp_path / "w")
    assert done.returncode == 0, done.stderr
    assert "10 windows" in done.stdout and "1 alerts" in done.stdout and "step_time" in done.stdout
    page = (tmp_path / "w" / "report.html").read_text(encoding="utf-8")
    fig = timeline_of(page)
    lines = [t for t in fig["data"] if t.get("mode") == "lines+markers"]
    assert [len(t["x"]) for t in lines] == [n - 1] * 4  # tok/s, tok/step, ms/step, speedup
    assert all(any(v > 0 for v in t["error_y"]["array"]) for t in lines)  # the intervals
    step_ms = lines[2]["y"]
    assert min(step_ms[5:]) > max(step_ms[:4])  # seed-regression's slower steps show
    shapes = [s for s in fig["layout"]["shapes"] if s.get("line", {}).get("color") == "#c0392b"]
    assert len(shapes) == 4  # the alert's line through each row
    assert any(a.get("text") == "alert step_time" for a in fig["layout"]["annotations"])
    faults = [t for t in fig["data"] if t.get("name") == "recorded faults"]
    assert faults and faults[0]["hovertext"] == ["error: canary"]
    assert alert.reason in page and "x1.490" in page and "host_per_token or kv_layout" in page
    assert "No summary" not in page and "recovered" in page
    assert HOSTILE not in page and "&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert HOSTILE not in json.dumps(fig)  # server text never enters the figure


def test_a_killed_watch_and_a_torn_line_still_render(tmp_path: Path):
    write_watch_run(tmp_path / "w")
    events = tmp_path / "w" / "events.jsonl"
    kept = [x for x in events.read_text().splitlines() if '"summary"' not in x]
    events.write_text("\n".join(kept) + "\n")
    with open(tmp_path / "w" / "windows.jsonl", "a") as fh:
        fh.write('{"event":"window","t":17900')  # killed mid-line
    done = report(tmp_path / "w", "--html", str(tmp_path / "out.html"))
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "out.html").read_text(encoding="utf-8")
    assert "No summary" in page and "1 lines of the event files could not be read" in page
    assert len(timeline_of(page)["data"][0]["x"]) == 9


def test_a_broken_watch_dir_is_one_line_and_exit_2(tmp_path: Path):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "watch.json").write_text("{not json")
    done = report(tmp_path / "w")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "cannot read watch.json" in done.stderr and "Traceback" not in done.stderr
    write_watch_run(tmp_path / "ok")
    done = report(tmp_path / "ok", "--csv", str(tmp_path / "csv"))
    assert done.returncode == 2 and "is a watch" in done.stderr
