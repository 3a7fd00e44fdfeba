"""The watch's run directory: `watch.json` (what was watched, with which options), then every
window in `windows.jsonl` and every other event (start, alert, recovered, error, summary) in
`events.jsonl`, one JSON line each, flushed as it happens so a killed watch loses nothing.
Named apart from a probe's run.json on purpose: `specscope runs` lists measured runs, and a
watch's windows are not one. `read_watch_run` reads it back for `specscope report` (the
timeline): a line that is not a JSON object (a watch killed mid-line) is counted and skipped,
never fatal; a directory without a readable watch.json is one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

from specscope.analysis.watch.events import Window
from specscope.report.watch_events import Event, event_line
from specscope.report.watch_html import RecordedWatch
from specscope.trace.rundir import read_jsonl

SCHEMA = 1
WATCH_JSON = "watch.json"


class WatchRunError(ValueError):
    """Not a readable watch run directory (one line, exit 2)."""


def is_watch_run(path: Path) -> bool:
    return (path / WATCH_JSON).is_file()


def read_watch_run(path: Path) -> RecordedWatch:
    try:
        meta = json.loads((path / WATCH_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise WatchRunError(f"{path}: cannot read {WATCH_JSON} ({e})") from None
    if not isinstance(meta, dict) or meta.get("kind") != "watch":
        raise WatchRunError(f'{path}: {WATCH_JSON} is not a watch\'s (no "kind": "watch")')
    options = meta.get("options")
    windows, bad_w = read_jsonl(path / "windows.jsonl")
    events, bad_e = read_jsonl(path / "events.jsonl")
    return RecordedWatch(
        str(path),
        options if isinstance(options, dict) else {},
        [w for w in windows if w.get("event") == "window"],
        events,
        bad_w + bad_e,
    )


class WatchRunDir:
    def __init__(self, path: Path, options: dict[str, Any]) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        (path / WATCH_JSON).write_text(
            json.dumps({"schema": SCHEMA, "kind": "watch", "options": options}, indent=2) + "\n",
            encoding="utf-8",
        )
        self._windows: TextIO = open(path / "windows.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        self._events: TextIO = open(path / "events.jsonl", "a", encoding="utf-8")  # noqa: SIM115

    def write(self, event: Event) -> None:
        fh = self._windows if isinstance(event, Window) else self._events
        fh.write(event_line(event) + "\n")
        fh.flush()

    def close(self) -> None:
        self._windows.close()
        self._events.close()
