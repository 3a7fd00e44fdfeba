"""In-house formats: a user regex whose named groups say what each part of the line means.

Recognised groups: `commit_len`, `accepted_drafts` (commit_len = accepted_drafts + 1 when only
one is given), `accept_rate`, `n_steps`, `step`, `ts` (ISO, `HH:MM:SS` or unix seconds), `rank`,
`request_id`. Every other named group lands in `fields`. A line the regex matches is one verify
step unless an `n_steps` group says otherwise.
"""

from __future__ import annotations

import re

from specscope.telemetry.prefix import PrefixParser
from specscope.telemetry.records import Malformed, Parsed, integer, number
from specscope.telemetry.scan import LineFormat
from specscope.telemetry.timewindow import parse_time

KNOWN_GROUPS = {
    "commit_len",
    "accepted_drafts",
    "accept_rate",
    "n_steps",
    "step",
    "ts",
    "rank",
    "request_id",
}


class PatternError(ValueError):
    """The user's `--pattern` does not compile or names no usable group."""


def compile_pattern(pattern: str) -> re.Pattern[str]:
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise PatternError(f"--pattern does not compile: {exc}") from None
    if not {"commit_len", "accepted_drafts", "accept_rate"} & set(rx.groupindex):
        raise PatternError(
            "--pattern needs a named group commit_len, accepted_drafts or accept_rate, "
            "e.g. 'commit=(?P<commit_len>[0-9.]+)'"
        )
    return rx


def custom_format(rx: re.Pattern[str]) -> LineFormat:
    """A LineFormat for a compiled user regex (no marker: every line is tried)."""

    def parse_custom(line: str, prefixes: PrefixParser) -> Parsed | Malformed | None:
        m = rx.search(line)
        if m is None:
            return None
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        commit = number(groups["commit_len"]) if "commit_len" in groups else None
        accepted = number(groups["accepted_drafts"]) if "accepted_drafts" in groups else None
        rate = number(groups["accept_rate"]) if "accept_rate" in groups else None
        if commit is None and accepted is None and rate is None:
            return Malformed("custom", "--pattern matched but its number groups are not numbers")
        if commit is None and accepted is not None:
            commit = accepted + 1.0
        elif accepted is None and commit is not None:
            accepted = commit - 1.0
        n_steps = integer(groups["n_steps"]) if "n_steps" in groups else 1
        pre = prefixes(line[: m.start()])
        ts = pre.ts
        if "ts" in groups:
            ts = parse_time(groups["ts"], now=prefixes.now, missing=ts)
        return {
            "format": "custom",
            "ts": ts,
            "rank": groups.get("rank", pre.rank),
            "request_id": groups.get("request_id"),
            "step": integer(groups["step"]) if "step" in groups else None,
            "commit_len": commit,
            "accepted_drafts": accepted,
            "accept_rate": rate,
            "n_steps": n_steps,
            "scope": "step" if n_steps == 1 else "interval",
            "fields": {k: v for k, v in groups.items() if k not in KNOWN_GROUPS},
        }

    return LineFormat("custom", "custom", (), parse_custom)
