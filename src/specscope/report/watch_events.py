"""The watch's event stream (ARCHITECTURE §8, beside the one-object contract): every event as
one JSON object, keys in a stable order, `event` first. Used for `--json` on stdout, the run
directory's JSON lines and the alert command's standard input alike, so the three agree."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, TextIO

from specscope.analysis.watch.detector import Alert, Recovery
from specscope.analysis.watch.events import Diagnosis, Start, Summary, WatchError, Window

Event = Start | Window | Alert | Recovery | WatchError | Diagnosis | Summary


def _num(x: float | None, digits: int = 6) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(x, digits)


def _ci(ci: tuple[float, float] | None, digits: int = 6) -> list[float | None] | None:
    return None if ci is None else [_num(ci[0], digits), _num(ci[1], digits)]


def window_json(w: Window) -> dict[str, Any]:
    f = w.figures
    return {
        "event": "window",
        "t": _num(w.t, 3),
        "start": _num(w.start, 3),
        "end": _num(w.end, 3),
        "state": w.state,
        "canaries": f.canaries,
        "canary_errors": w.canary_errors,
        "steps": f.steps,
        "decode_tps": _num(f.decode_tps, 3),
        "decode_tps_ci": _ci(f.decode_tps_ci, 3),
        "mean_commit_len": _num(f.mean_commit_len, 4),
        "mean_commit_len_ci": _ci(f.mean_commit_len_ci, 4),
        "mean_step_s": _num(f.mean_step_s),
        "mean_step_s_ci": _ci(f.mean_step_s_ci),
        "interval_method": "normal over the window's steps (steps taken as independent)",
        "speculation": w.speculation,
        "speculation_reason": w.speculation_reason,
        "server": w.server,
        "cusum": {
            k: {"statistic": _num(v, 4), "threshold": _num(h, 4)} for k, (v, h) in w.cusum.items()
        },
        "baseline": w.baseline,
        "speedup": None if w.speedup is None else _num(w.speedup.value, 4),
        "speedup_ci": None if w.speedup is None else _ci(w.speedup.ci, 4),
        "speculation_pays": None if w.speedup is None else w.speedup.pays,
    }


def alert_json(a: Alert) -> dict[str, Any]:
    return {
        "event": "alert",
        "factor": a.factor,
        "ratio": _num(a.ratio, 4),
        "ci": _ci(a.ci, 4),
        "since": _num(a.since, 3),
        "cause": a.cause,
        "t": _num(a.t, 3),
        "candidates": list(a.candidates),
        "reason": a.reason,
        "samples": a.samples,
        "statistic": _num(a.statistic, 4),
        "threshold": _num(a.threshold, 4),
        "next": "specscope diagnose URL --baseline RUN_DIR (a full diagnosis separates the "
        "candidates)",
    }


def event_json(e: Event) -> dict[str, Any]:
    """The JSON object of any watch event."""
    if isinstance(e, Window):
        return window_json(e)
    if isinstance(e, Alert):
        return alert_json(e)
    if isinstance(e, Recovery):
        return {"event": "recovered", "factor": e.factor, "t": _num(e.t, 3)}
    if isinstance(e, WatchError):
        return {"event": "error", **dataclasses.asdict(e), "t": _num(e.t, 3)}
    if isinstance(e, Diagnosis):
        return {"event": "diagnosis", **dataclasses.asdict(e), "t": _num(e.t, 3)}
    name = "start" if isinstance(e, Start) else "summary"
    return {"event": name, **dataclasses.asdict(e)}


def event_line(e: Event) -> str:
    """One line of the stream (no newline inside: json.dumps escapes them)."""
    return json.dumps(event_json(e), separators=(",", ":"), allow_nan=False)


def write_event(e: Event, stream: TextIO) -> None:
    """One event line on `stream`, flushed at once (a pipe reader sees it as it happens)."""
    stream.write(event_line(e) + "\n")
    stream.flush()
