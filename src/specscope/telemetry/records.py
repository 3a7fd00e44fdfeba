"""The typed record every telemetry parser yields, whatever the server.

One shape for all formats so that analysis can weigh them together: a record is either one
verify step (`n_steps == 1`, e.g. a DDTREE metrics line) or a summary over many steps (a SGLang
`Decode batch` line over its log interval, a vLLM interval, a Prometheus delta, a llama.cpp
request's timings) with `n_steps` its weight when known.

Parsers return plain dicts of `SpecRecord` keyword arguments (`Parsed`) rather than `SpecRecord`
objects: validating a pydantic model costs microseconds, and a 1 GB journal holds millions of
matching lines whose summary never needs the objects. `to_record` builds the typed record on
demand. The number helpers are the ones every line format reads its values with.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pydantic import BaseModel, Field


class SpecRecord(BaseModel):
    format: str  # sglang_decode | ddtree | avg_commit | vllm_spec | llamacpp_log | llamacpp_timings | prometheus | server_info | custom
    ts: float | None = None  # unix seconds (log timestamp), None when the line has none
    rank: str | None = None  # e.g. "TP0"
    request_id: str | None = None
    step: int | None = None
    commit_len: float | None = None  # tokens per verify step including the bonus token
    accepted_drafts: float | None = None  # commit_len - 1 for per-step records
    accept_rate: float | None = None  # accepted / proposed drafts
    n_steps: int | None = None  # verify steps this record covers (1 = one step)
    per_position: list[float] | None = None  # acceptance rate by draft position
    scope: str = "interval"  # step | interval | request | lifetime | run_delta
    fields: dict[str, Any] = Field(default_factory=dict)  # every other parsed field, typed
    line_no: int | None = None
    source: str = ""  # file name, "-", or the command


Parsed = dict[str, Any]


class Malformed(NamedTuple):
    """A line that carries a format's marker but not a parseable body."""

    format: str
    reason: str


def to_record(parsed: Parsed, line_no: int | None = None, source: str = "") -> SpecRecord:
    """The typed record of a parse result."""
    rec = SpecRecord(**parsed)
    if line_no is not None:
        rec.line_no = line_no
    if source:
        rec.source = source
    return rec


# A plain number as `number()` reads it (no sign, exponent, `nan` or `%`), with bounded digits
# (400 digits would be inf, which `number()` drops): what the fast paths match in raw bytes.
PLAIN_NUMBER = rb"\d{1,20}(?:\.\d{1,20})?"


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
