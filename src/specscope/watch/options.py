"""The watch's options as one frozen object that checks itself when built (as entrypoints'
options do), so a library caller gets the CLI's checks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from specscope.probe.client import Timeouts

# A canary's timeouts: a watch must never hang on one request (the next is due).
CANARY_TIMEOUTS = Timeouts(connect=5.0, first_byte=60.0, between_chunks=30.0, total=300.0)


class WatchOptionError(ValueError):
    """An option out of range; the message names the flag."""


@dataclass(frozen=True)
class WatchOptions:
    url: str
    auth: aiohttp.BasicAuth | None = None
    metrics_url: str | None = None
    logs: Path | None = None
    logs_cmd: tuple[str, ...] = ()
    probe_every_s: float = 10.0  # 0: no canary (passive only)
    interval_s: float = 10.0
    duration_s: float | None = None
    baseline_dir: Path | None = None
    plain_baseline_dir: Path | None = None  # a recorded plain run: speculation's speedup
    alert_cmd: tuple[str, ...] = ()
    alert_timeout_s: float = 10.0
    diagnose_on_alert: bool = False
    out: Path | None = None
    prompt_tokens: int = 512
    max_tokens: int = 256
    workload: str | None = None
    warmup_s: float = 60.0
    false_alarms_per_day: float = 0.1
    min_shift: float = 1.10
    timeouts: Timeouts = CANARY_TIMEOUTS

    def __post_init__(self) -> None:
        checks = [
            ("--probe-every", self.probe_every_s, 0.0, False),
            ("--interval", self.interval_s, 0.05, True),
            ("--warmup", self.warmup_s, 0.0, False),
            ("--alert-timeout", self.alert_timeout_s, 0.1, True),
        ]
        for flag, value, low, strict in checks:
            if not math.isfinite(value) or value < low or (strict and value <= 0):
                raise WatchOptionError(f"{flag} must be a number >= {low}, got {value}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise WatchOptionError(f"--duration must be > 0 seconds, got {self.duration_s}")
        if not 1 <= self.max_tokens <= 1 << 16:
            raise WatchOptionError(f"--max-tokens must be within 1..65536, got {self.max_tokens}")
        if not 1 <= self.prompt_tokens <= 1 << 20:
            raise WatchOptionError(f"--prompt-tokens must be within 1..{1 << 20}")
        if not self.min_shift > 1.0:
            raise WatchOptionError(f"--min-change must be > 1 (a ratio), got {self.min_shift}")
        if self.logs is not None and self.logs_cmd:
            raise WatchOptionError("--logs and --logs-cmd: give one log source, not both")
        if not self.false_alarms_per_day > 0:
            raise WatchOptionError("--false-alarms-per-day must be > 0")

    @property
    def budget_tokens_per_hour(self) -> int:
        """The canary's token budget per hour (prompt and output), printed at start."""
        if self.probe_every_s <= 0:
            return 0
        return int(3600 / self.probe_every_s * (self.prompt_tokens + self.max_tokens))
