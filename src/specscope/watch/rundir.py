"""The watch's run directory: `watch.json` (what was watched, with which options), then every
window in `windows.jsonl` and every other event (start, alert, recovered, error, summary) in
`events.jsonl`, one JSON line each, flushed as it happens so a killed watch loses nothing.
Named apart from a probe's run.json on purpose: `specscope runs` lists measured runs, and a
watch's windows are not one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

from specscope.analysis.watch.events import Window
from specscope.report.watch_events import Event, event_line

SCHEMA = 1


class WatchRunDir:
    def __init__(self, path: Path, options: dict[str, Any]) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        (path / "watch.json").write_text(
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
