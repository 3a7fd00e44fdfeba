"""Per-step speculative metric lines: the story's `DDTREE metrics ... avg_accepted_drafts=A
avg_commit_len=L` (also `DFLASH metrics`), and lucebox-style `[spec-decode] ... avg_commit=X`
/ `[hybrid-spec] ... avg_commit=X AL=Y` summaries (observability.md §1d).

The DDTREE line is the seed story's decisive evidence, so its parse is the hot path of
`specscope logs`: one `find` for the marker, one regex for the key=value body.
"""

from __future__ import annotations

import re

from specscope.telemetry.base import LineFormat, Malformed, Parsed, integer, number
from specscope.telemetry.prefix import PrefixParser

_METRICS = re.compile(r"\b(DDTREE|DFLASH|DSPARK) metrics\b")
# The rank tag right before the marker wins over any earlier one (a journal prefix may hold
# other bracketed text); the fast path reads ranks the same way.
_RANK_BEFORE = re.compile(r"(TP\d+(?: [A-Z]+\d+)*)\]\s*$")
_KV = re.compile(r"([A-Za-z_][\w.-]*)=(\S*)")
_INT_KEYS = {"step", "bs", "batch", "n", "tokens", "num_steps", "n_steps"}


def _kv_fields(body: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, raw in _KV.findall(body):
        raw = raw.rstrip(",;")
        if key in ("req", "rid", "request_id", "id"):
            out[key] = raw
            continue
        value: object = integer(raw) if key in _INT_KEYS else None
        if value is None:
            value = number(raw)
        out[key] = raw if value is None else value
    return out


def parse_ddtree(line: str, prefixes: PrefixParser) -> Parsed | Malformed | None:
    """`[ts TP0] DDTREE metrics req=R step=S avg_accepted_drafts=A avg_commit_len=L` -> one
    verify step (scope `step`); either number alone is enough (L = A + 1)."""
    m = _METRICS.search(line)
    if m is None:
        return None
    fields = _kv_fields(line[m.end() :])
    accepted = fields.pop("avg_accepted_drafts", None)
    commit = fields.pop("avg_commit_len", None)
    accepted = accepted if isinstance(accepted, float | int) else None
    commit = commit if isinstance(commit, float | int) else None
    if accepted is None and commit is None:
        return Malformed("ddtree", "no numeric avg_accepted_drafts= or avg_commit_len=")
    if commit is None:
        commit = accepted + 1.0  # type: ignore[operator]
    elif accepted is None:
        accepted = commit - 1.0
    prefix = line[: m.start()]
    pre = prefixes(prefix)
    rank = pre.rank
    tag = _RANK_BEFORE.search(prefix)
    if tag:
        rank = tag.group(1).split()[0]
    req = fields.pop("req", None) or fields.pop("rid", None) or fields.pop("request_id", None)
    step = fields.pop("step", None)
    fields["engine"] = m.group(1)
    return {
        "format": "ddtree",
        "ts": pre.ts,
        "rank": rank,
        "request_id": None if req is None else str(req),
        "step": step if isinstance(step, int) else None,
        "commit_len": float(commit),
        "accepted_drafts": float(accepted),
        "n_steps": 1,
        "scope": "step",
        "fields": fields,
    }


_AVG_COMMIT = re.compile(r"\bavg_commit=")
_TAG = re.compile(r"\[([\w-]+)\]")
_ACCEPTED = re.compile(r"\baccepted=(\d+)/(\d+)")
_PERCENT = re.compile(r"\((\d+(?:\.\d+)?)%\)")


def parse_avg_commit(line: str, prefixes: PrefixParser) -> Parsed | Malformed | None:
    """lucebox `[spec-decode] tokens=256 accepted=213/256 (83.2%) avg_commit=8.53` (one request
    or interval; steps ~= tokens / avg_commit) and `[hybrid-spec] ... avg_commit=X AL=Y`."""
    m = _AVG_COMMIT.search(line)
    if m is None:
        return None
    tag = _TAG.search(line, 0, m.start())
    fields = _kv_fields(line[tag.end() :] if tag else line)
    commit = fields.pop("avg_commit", None)
    if not isinstance(commit, float | int):
        return Malformed("avg_commit", "avg_commit= is not a number")
    if tag:
        fields["tag"] = tag.group(1)
    accept_rate = None
    acc = _ACCEPTED.search(line)
    if acc:
        fields["accepted"] = int(acc.group(1))
        fields["proposed"] = int(acc.group(2))
        if int(acc.group(2)) > 0:
            accept_rate = int(acc.group(1)) / int(acc.group(2))
    else:
        pct = _PERCENT.search(line)
        if pct:
            accept_rate = float(pct.group(1)) / 100.0
    tokens = fields.get("tokens")
    n_steps = round(tokens / commit) if isinstance(tokens, int) and commit > 0 else None
    pre = prefixes(line[: tag.start()] if tag else "")
    return {
        "format": "avg_commit",
        "ts": pre.ts,
        "rank": pre.rank,
        "commit_len": float(commit),
        "accepted_drafts": float(commit) - 1.0,
        "accept_rate": accept_rate,
        "n_steps": n_steps,
        "scope": "interval",
        "fields": fields,
    }


DDTREE = LineFormat(
    "ddtree", "ddtree", (b"DDTREE metrics", b"DFLASH metrics", b"DSPARK metrics"), parse_ddtree
)
AVG_COMMIT = LineFormat("avg_commit", "ddtree", (b"avg_commit=",), parse_avg_commit)
