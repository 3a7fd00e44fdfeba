"""Where and when a log line was written: the timestamp and rank in its prefix.

Servers and log collectors wrap the interesting text in prefixes (SGLang's
`[2025-10-22 10:27:57 TP0]`, journalctl's `Nov 29 10:00:00 host python[123]: `, vLLM's
`(APIServer pid=1) INFO 05-01 14:24:50 [metrics.py:101] `). Every format parser shares this
module so that time windows and the rank filter behave the same for all of them. Results are
cached per prefix string because consecutive lines usually share the same second and rank.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from datetime import datetime
from typing import NamedTuple

# ANSI colour sequences first (so that `ESC[32m` leaves nothing behind), then any other control
# character, as the story's `sed "s/[[:cntrl:]]//g"` did.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# `[2025-10-22 10:27:57 TP0]`, `[2026-07-21 15:00:13 TP0 EP0]`, `[2025-01-01 00:00:00 DP1 TP3]`,
# `[2025-10-22 10:27:57]`, also with fractional seconds.
_SGLANG = re.compile(
    r"\[(?P<date>\d{4}-\d\d-\d\d)[ T](?P<time>\d\d:\d\d:\d\d(?:[.,]\d+)?)(?P<ranks>(?: [A-Z]+\d+)*)\]"
)
# A bare rank tag: `[TP0]`, `[TP0 EP0]`.
_BARE_RANK = re.compile(r"\[(?P<ranks>[A-Z]+\d+(?: [A-Z]+\d+)*)\]")
# journalctl short format: `Nov 29 10:00:00 host unit[pid]: `.
_JOURNAL = re.compile(
    r"^(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\d{1,2}) (?P<time>\d\d:\d\d:\d\d)"
)
# journalctl short-iso and python logging: `2026-11-29T10:00:00+0000 ` / `2026-11-29 10:00:00,123 `.
_ISO_START = re.compile(
    r"^(?P<date>\d{4}-\d\d-\d\d)[ T](?P<time>\d\d:\d\d:\d\d)(?:[.,]\d+)?(?P<tz>Z|[+-]\d\d:?\d\d)?"
)
# vLLM: `INFO 05-01 14:24:50 [metrics.py:101]` (no year).
_VLLM = re.compile(
    r"(?:^|\s)(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<md>\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d)"
)
_RANK_TAG = re.compile(r"TP\d+")

_MONTHS = {
    m: i
    for i, m in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1
    )
}


class Prefix(NamedTuple):
    ts: float | None  # unix seconds; naive log times are local time, as the server wrote them
    rank: str | None  # the tensor-parallel rank ("TP0"), None when the line has none
    rank_label: str | None  # every rank tag as written ("TP0 EP0")


def clean_line(text: str) -> str:
    """Drop ANSI colour codes and control characters (journal dumps carry both)."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return _CONTROL.sub("", text)


@functools.lru_cache(maxsize=4096)
def _minute_start(year: int, month: int, day: int, hh: int, mm: int) -> float:
    """Unix time of a local minute. Cached: consecutive log lines share their minute, and
    building a datetime per line was a visible cost; DST shifts happen on minute boundaries,
    so minute start + seconds is exact."""
    return datetime(year, month, day, hh, mm).timestamp()


def local_unix(year: int, month: int, day: int, hms: str) -> float | None:
    """Unix seconds of a naive local `HH:MM:SS[.frac]` on a date (None when it is invalid);
    the fast paths call it directly on the pieces they matched."""
    try:
        frac = 0.0
        if "." in hms or "," in hms:
            hms, _, f = hms.replace(",", ".").partition(".")
            frac = float("0." + f) if f.isdigit() else 0.0
        hh, mm, ss = (int(x) for x in hms.split(":"))
        if not 0 <= ss <= 59:
            return None  # what datetime() says about second 60 and beyond
        return _minute_start(year, month, day, hh, mm) + ss + frac
    except (ValueError, OverflowError, OSError):
        return None


def _infer_year(month: int, day: int, hms: str, now: float) -> float | None:
    """Timestamps without a year get the current year, or last year if that would put them
    more than a day in the future (a December log read in January)."""
    year = time.localtime(now).tm_year
    ts = local_unix(year, month, day, hms)
    if ts is not None and ts > now + 86400:
        ts = local_unix(year - 1, month, day, hms)
    return ts


def split_ranks(text: str) -> tuple[str | None, str | None]:
    """`TP0 EP0` -> ("TP0", "TP0 EP0"): the tensor-parallel rank and every tag as written."""
    label = text.strip() or None
    if label is None:
        return None, None
    tp = _RANK_TAG.search(label)
    return (tp.group(0) if tp else label.split()[0]), label


def _parse_prefix(prefix: str, now: float) -> Prefix:
    ts: float | None = None
    rank: str | None = None
    label: str | None = None
    m = _SGLANG.search(prefix)
    if m:
        y, mo, d = (int(x) for x in m.group("date").split("-"))
        ts = local_unix(y, mo, d, m.group("time"))
        rank, label = split_ranks(m.group("ranks"))
    else:
        b = _BARE_RANK.search(prefix)
        if b:
            rank, label = split_ranks(b.group("ranks"))
    if ts is None:
        j = _JOURNAL.match(prefix)
        if j:
            ts = _infer_year(_MONTHS[j.group("mon")], int(j.group("day")), j.group("time"), now)
        else:
            iso = _ISO_START.match(prefix)
            if iso:
                y, mo, d = (int(x) for x in iso.group("date").split("-"))
                ts = local_unix(y, mo, d, iso.group("time"))
                tz = iso.group("tz")
                if ts is not None and tz:
                    with contextlib.suppress(ValueError):
                        ts = datetime.fromisoformat(
                            f"{iso.group('date')}T{iso.group('time')}{'+00:00' if tz == 'Z' else tz}"
                        ).timestamp()
            else:
                v = _VLLM.search(prefix)
                if v:
                    mo, d = (int(x) for x in v.group("md").split("-"))
                    ts = _infer_year(mo, d, v.group("time"), now)
    return Prefix(ts, rank, label)


class PrefixParser:
    """Parses line prefixes with a bounded cache (one `now` per parser, so that year inference
    is stable over a whole read)."""

    def __init__(self, now: float | None = None, cache_size: int = 50_000) -> None:
        self.now = time.time() if now is None else now
        self._cache: dict[str, Prefix] = {}
        self._cache_size = cache_size

    def __call__(self, prefix: str) -> Prefix:
        # A journal prefix makes every line's prefix unique; when an SGLang `[YYYY-...` stamp
        # is present it alone decides ts and rank, so it is the cache key.
        at = prefix.find("[20")
        if at > 0 and prefix.find("[", 0, at) >= 0 and _SGLANG.match(prefix, at):
            prefix = prefix[at:]
        hit = self._cache.get(prefix)
        if hit is not None:
            return hit
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        parsed = _parse_prefix(prefix, self.now)
        self._cache[prefix] = parsed
        return parsed


_default_parser = PrefixParser()


def parse_prefix(prefix: str, now: float | None = None) -> Prefix:
    """Timestamp and rank of a line prefix (the text before the format's marker)."""
    if now is not None:
        return _parse_prefix(prefix, now)
    return _default_parser(prefix)
