"""A live `--serve-metrics` exporter (watch/exporter.py) fed events and scraped over loopback:
what the exporter test and the Grafana dashboard's test both read, so that the dashboard is
checked against what is really served."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable

from specscope.analysis.watch.detector import Alert
from specscope.analysis.watch.events import WatchError, Window
from specscope.analysis.watch.speedup import Speedup
from specscope.analysis.watch.window import WindowFigures
from specscope.watch.exporter import Exporter
from support.loopback import free_port


def scrape_after(events: Iterable[object]) -> str:
    """The exporter's /metrics text after `events` were handed to it, in order."""
    port = free_port()
    ex = Exporter(port)
    try:
        for event in events:
            ex.update(event)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return resp.read().decode()
    finally:
        ex.close()


def example_events() -> list[object]:
    """A window (both factors' CUSUMs, a speedup that does not pay), an alert and a canary
    error: every metric and every label the exporter serves gets a value."""
    figures = WindowFigures(1, 50, 4.8, (4.5, 5.1), 0.0165, (0.016, 0.017), 290.9, (280, 300))
    cusum = {"step_time": (1.5, 4.5), "commit_len": (0.0, 9.0)}
    gain = Speedup(0.6, (0.55, 0.65), False)
    return [
        Window(1.0, 0.0, 1.0, "watching", figures, 0, "on", "r", None, cusum, None, gain),
        Alert("step_time", 1.5, (1.4, 1.6), 0.0, 1.0, None, (), "r", 2, 6.0, 4.5),
        WatchError(1.0, "canary", "connection", "refused"),
    ]
