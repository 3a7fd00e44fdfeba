"""User-given times for `--since/--until`: ISO (`2026-11-29T10:00:00`, `2026-11-29 10:00`),
clock time of today (`10:00:00`, `10:00`), relative to now (`-60s`, `-5m`, `-2h`, `-1d`, like
journalctl), or unix seconds. Naive times are local, as the servers' own log stamps are."""

from __future__ import annotations

import re
import time
from datetime import datetime

_RELATIVE = re.compile(r"^-\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d)?$")
_CLOCK = re.compile(r"^(\d{1,2}):(\d\d)(?::(\d\d(?:\.\d+)?))?$")
_UNITS = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


class TimeFormatError(ValueError):
    """A `--since/--until` value in none of the accepted forms."""


def parse_time(text: str, now: float | None = None, missing: float | None = None) -> float | None:
    """Unix seconds of a user time; `missing` when `text` is not a time (custom-regex use)."""
    try:
        return parse_user_time(text, now)
    except TimeFormatError:
        return missing


def parse_user_time(text: str, now: float | None = None) -> float:
    """Unix seconds of `text`; raises TimeFormatError with the accepted forms."""
    now = time.time() if now is None else now
    s = text.strip()
    rel = _RELATIVE.match(s)
    if rel:
        return now - float(rel.group(1)) * _UNITS[rel.group(2)]
    clock = _CLOCK.match(s)
    if clock:
        today = datetime.fromtimestamp(now)
        sec = float(clock.group(3) or 0)
        try:
            day = today.replace(
                hour=int(clock.group(1)), minute=int(clock.group(2)), second=int(sec), microsecond=0
            )
        except ValueError:
            raise TimeFormatError(f"not a clock time: {text!r}") from None
        return day.timestamp() + (sec - int(sec))
    try:
        return float(s)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(s.replace(" ", "T", 1) if " " in s else s).timestamp()
    except ValueError:
        raise TimeFormatError(
            f"not a time: {text!r} (use ISO like 2026-11-29T10:00:00, HH:MM:SS, -60s/-5m/-2h, "
            "or unix seconds)"
        ) from None
