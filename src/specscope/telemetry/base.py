"""Shared pieces of every line format: what a parse returns and how a format is described.

Parsers return plain dicts of `SpecRecord` keyword arguments rather than `SpecRecord` objects:
validating a pydantic model costs microseconds, and a 1 GB journal holds millions of matching
lines whose summary never needs the objects. `to_record` builds the typed record on demand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from specscope.telemetry.prefix import PrefixParser
from specscope.telemetry.records import SpecRecord

Parsed = dict[str, Any]


class Malformed(NamedTuple):
    """A line that carries a format's marker but not a parseable body."""

    format: str
    reason: str


LineParser = Callable[[str, PrefixParser], "Parsed | Malformed | None"]


@dataclass(frozen=True)
class LineFormat:
    """One log format: the substrings that must occur in a line (cheap prefilter, checked on
    raw bytes before any regex) and the parser for a line that contains one of them."""

    name: str  # SpecRecord.format
    group: str  # the `--format` choice it belongs to
    markers: tuple[bytes, ...]
    parse: LineParser


def to_record(parsed: Parsed, line_no: int | None = None, source: str = "") -> SpecRecord:
    """The typed record of a parse result."""
    rec = SpecRecord(**parsed)
    if line_no is not None:
        rec.line_no = line_no
    if source:
        rec.source = source
    return rec


def number(text: str) -> float | None:
    """A float from log text, None for placeholders such as `…`, `..` or `nan`."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def integer(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def float_list(text: str) -> list[float]:
    """`0.600, 0.385, …` or `(0.805, 0.632)` -> numbers, skipping placeholders."""
    out = []
    for part in text.strip().strip("()[]").split(","):
        v = number(part)
        if v is not None:
            out.append(v)
    return out
