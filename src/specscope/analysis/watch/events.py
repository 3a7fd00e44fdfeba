"""The watch's events as data (report/watch_events.py turns them into the JSON lines of
ARCHITECTURE §8's watch stream). Alerts and recoveries are detector.py's; these are the rest."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specscope.analysis.watch.speedup import PlainReference, Speedup
from specscope.analysis.watch.window import WindowFigures


@dataclass(frozen=True)
class Start:
    t: float
    url: str
    probe_every_s: float | None  # None: no canary
    interval_s: float
    prompt_tokens: int
    max_tokens: int
    budget_tokens_per_hour: int
    warmup_s: float
    baseline: str  # "warm-up" or the run directory
    false_alarms_per_day: float
    min_shift: float  # the smallest change of interest, as a ratio (1.10: 10%)
    plain_baseline: PlainReference | None = None  # the speedup's reference (a plain run)


@dataclass(frozen=True)
class Window:
    t: float
    start: float
    end: float
    state: str  # warmup | watching
    figures: WindowFigures
    canary_errors: int
    speculation: str  # on | off | unknown
    speculation_reason: str
    server: dict[str, Any] | None  # what the server said in the window (metrics, logs)
    cusum: dict[str, tuple[float, float]]  # factor -> (statistic, threshold)
    baseline: dict[str, Any] | None  # commit_len, step_s, source; None in the warm-up
    speedup: Speedup | None = None  # None: no plain reference, or no reliable canary


@dataclass(frozen=True)
class WatchError:
    """A recorded fault (canary failure, scrape failure, server restart, log rotation, an
    alert command that failed): survived, never an alert by itself."""

    t: float
    source: str  # canary | metrics | logs | alert_cmd
    kind: str
    message: str


@dataclass(frozen=True)
class Diagnosis:
    """A `specscope diagnose` run on an alert (--diagnose-on-alert) and what it found."""

    t: float
    factor: str  # the alert that started it
    run_dir: str | None
    exit_code: int | None  # None: it did not finish in time
    cause: str | None  # the diagnosis' top cause
    message: str  # its verdict, or its error


@dataclass(frozen=True)
class Summary:
    t: float
    started: float
    windows: int
    canaries: int
    canary_errors: int
    errors: int
    alerts: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    run_dir: str | None = None
