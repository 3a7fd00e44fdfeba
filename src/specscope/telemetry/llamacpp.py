"""llama.cpp server speculation reports (observability.md §3): the per-request
`draft acceptance rate = …` line (old) / `slot print_timing: … draft acceptance = …, mean
acceptance length = …, acceptance rate per position = (…)` (PR #24536; some builds print
`mean len = …` instead), the per-implementation `statistics <impl>: #calls …` line, and the
`timings` object of a response.

What llama.cpp's mean length counts: `mean acceptance length` / `mean len` / `#mean acc len`
and `1 + accepted / drafts` (Prometheus `spec_decode_num_drafts`) average over the steps where
something was DRAFTED. Steps where the drafter proposed nothing (n-gram speculation finds no
match: often) commit one token and are left out, so the figure overstates tokens per step as a
client sees them (one n-gram request logged 6.25 while the client saw ~3). Records built from
those figures say so: `fields["commit_len_basis"] = "drafted_steps"`. Where the counts allow,
the all-steps figure is computed instead (`all_steps_commit_len`) and labelled `"all_steps"`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from specscope.telemetry.commit import ALL_STEPS, DRAFTED_STEPS
from specscope.telemetry.prefix import PrefixParser
from specscope.telemetry.records import Malformed, Parsed, float_list, number
from specscope.telemetry.scan import LineFormat

_ACCEPTANCE = re.compile(
    r"draft acceptance(?: rate)? = (?P<rate>\S+) \(\s*(?P<acc>\d+) accepted /\s*(?P<gen>\d+) generated\)"
)
_MEAN_LEN = re.compile(r"mean (?:acceptance length|len) =\s*(\S+?),?(?:\s|$)")


def all_steps_commit_len(tokens: float, requests: float, accepted: float) -> float | None:
    """Mean tokens per decode step over ALL steps, drafted or not.

    A request's first token comes from prefill; each later step commits its accepted drafts
    plus one token, whether or not anything was drafted. So over `requests` requests that
    generated `tokens` tokens with `accepted` accepted drafts, steps = tokens - requests -
    accepted and the mean is (tokens - requests) / steps. (Prometheus cross-check:
    `llamacpp:n_decode_total` counts one decode per prompt plus one per step, so its delta is
    requests + steps.) The last step of a request cut at max tokens may commit fewer than it
    accepted; the error is at most one step per request. None when the counts are inconsistent.
    """
    decoded = tokens - requests
    steps = decoded - accepted
    if decoded <= 0 or steps <= 0 or accepted < 0:
        return None
    return decoded / steps


_PER_POS = re.compile(r"acceptance rate per position = \(([^)]*)\)")
_SLOT = re.compile(r"\bid\s+(?P<slot>\d+) \| task (?P<task>\d+)")
_STATS = re.compile(r"statistics\s+(?P<impl>[^:\s]+):")
_STAT_FIELDS = {
    "gen_drafts": re.compile(r"#gen drafts = (\d+)"),
    "acc_drafts": re.compile(r"#acc drafts = (\d+)"),
    "gen_tokens": re.compile(r"#gen tokens = (\d+)"),
    "acc_tokens": re.compile(r"#acc tokens = (\d+)"),
}
_STAT_MEAN = re.compile(r"#mean acc len = (\S+?),")
_STAT_POS = re.compile(r"#acc rate/pos = \(([^)]*)\)")


def _parse_acceptance(line: str, prefixes: PrefixParser) -> Parsed | Malformed:
    m = _ACCEPTANCE.search(line)
    if m is None:
        return Malformed("llamacpp_log", "no 'draft acceptance = R (A accepted / G generated)'")
    rate = number(m.group("rate"))
    fields: dict[str, Any] = {"accepted": int(m.group("acc")), "generated": int(m.group("gen"))}
    mean = _MEAN_LEN.search(line)
    commit = number(mean.group(1)) if mean else None
    pos = _PER_POS.search(line)
    slot = _SLOT.search(line)
    if slot:
        fields["slot"] = int(slot.group("slot"))
    if commit is not None:
        fields["commit_len_basis"] = DRAFTED_STEPS
        if commit > 1:  # drafted steps = accepted / (mean - 1): the weight of this figure
            fields["drafted_steps"] = round(fields["accepted"] / (commit - 1.0))
    pre = prefixes(line[: m.start()])
    return {
        "format": "llamacpp_log",
        "ts": pre.ts,
        "rank": pre.rank,
        "request_id": slot.group("task") if slot else None,
        "commit_len": commit,
        "accepted_drafts": None if commit is None else commit - 1.0,
        "accept_rate": rate,
        "per_position": (float_list(pos.group(1)) or None) if pos else None,
        "scope": "request",
        "fields": fields,
    }


def _parse_statistics(line: str, prefixes: PrefixParser) -> Parsed | Malformed:
    m = _STATS.search(line)
    fields: dict[str, Any] = {"impl": m.group("impl") if m else None}
    for name, rx in _STAT_FIELDS.items():
        f = rx.search(line)
        if f:
            fields[name] = int(f.group(1))
    gen_drafts = fields.get("gen_drafts")
    acc_tokens = fields.get("acc_tokens")
    gen_tokens = fields.get("gen_tokens")
    if not isinstance(gen_drafts, int) or not isinstance(acc_tokens, int):
        return Malformed("llamacpp_log", "statistics line without numeric #gen drafts/#acc tokens")
    mean = _STAT_MEAN.search(line)
    commit = number(mean.group(1)) if mean else None
    if commit is None and gen_drafts > 0:
        commit = 1.0 + acc_tokens / gen_drafts
    pos = _STAT_POS.search(line)
    if commit is not None:
        fields["commit_len_basis"] = DRAFTED_STEPS
    pre = prefixes(line[: m.start()] if m else "")
    return {
        "format": "llamacpp_log",
        "ts": pre.ts,
        "rank": pre.rank,
        "commit_len": commit,
        "accepted_drafts": None if commit is None else commit - 1.0,
        "accept_rate": acc_tokens / gen_tokens
        if isinstance(gen_tokens, int) and gen_tokens
        else None,
        "n_steps": gen_drafts,
        "per_position": (float_list(pos.group(1)) or None) if pos else None,
        "scope": "request",
        "fields": fields,
    }


def parse_llamacpp_log(line: str, prefixes: PrefixParser) -> Parsed | Malformed | None:
    """A llama.cpp draft-acceptance or `statistics` line -> SpecRecord kwargs."""
    if "draft acceptance" in line:
        return _parse_acceptance(line, prefixes)
    if "#calls" in line and "statistics" in line:
        return _parse_statistics(line, prefixes)
    return None


def parse_llamacpp_timings(obj: Any) -> Parsed | None:
    """A response (with a `timings` key) or a bare `timings` object -> SpecRecord kwargs; None
    when the request did not speculate (`draft_n` is only present when it is > 0).

    With `predicted_n` and `draft_n_accepted` the record carries the request's all-steps commit
    length (`all_steps_commit_len` with one request) and its step count."""
    if not isinstance(obj, dict):
        return None
    timings = obj.get("timings", obj)
    if not isinstance(timings, dict):
        return None
    draft_n = timings.get("draft_n")
    accepted = timings.get("draft_n_accepted")
    if not isinstance(draft_n, int | float) or isinstance(draft_n, bool) or draft_n <= 0:
        return None
    fields = {
        k: v for k, v in timings.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    rid = obj.get("id") if obj is not timings else None
    predicted = fields.get("predicted_n")
    commit = n_steps = None
    if isinstance(accepted, int | float) and isinstance(predicted, int | float):
        commit = all_steps_commit_len(predicted, 1, accepted)
        if commit is not None:
            n_steps = int(predicted - 1 - accepted)
            fields["commit_len_basis"] = ALL_STEPS
    return {
        "format": "llamacpp_timings",
        "request_id": str(rid) if isinstance(rid, str | int) else None,
        "commit_len": commit,
        "accepted_drafts": None if commit is None else commit - 1.0,
        "n_steps": n_steps,
        "accept_rate": accepted / draft_n if isinstance(accepted, int | float) else None,
        "scope": "request",
        "fields": fields,
    }


def parse_timings_line(line: str, prefixes: PrefixParser) -> Parsed | Malformed | None:
    """A log line that carries a JSON object with `timings` (e.g. a logged response)."""
    if '"timings"' not in line and '"draft_n"' not in line:
        return None
    start = line.find("{")
    if start < 0:
        return Malformed("llamacpp_timings", "no JSON object")
    try:
        obj, _ = json.JSONDecoder().raw_decode(line, start)
    except (ValueError, RecursionError):
        return Malformed("llamacpp_timings", "JSON object does not parse")
    parsed = parse_llamacpp_timings(obj)
    if parsed is None:
        return None
    pre = prefixes(line[:start])
    parsed["ts"] = pre.ts
    parsed["rank"] = pre.rank
    return parsed


LLAMACPP_LOG = LineFormat(
    "llamacpp_log", "llamacpp", (b"draft acceptance", b"#calls"), parse_llamacpp_log
)
LLAMACPP_TIMINGS = LineFormat("llamacpp_timings", "llamacpp", (b'"draft_n"',), parse_timings_line)
