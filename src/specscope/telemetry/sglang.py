"""SGLang's periodic `Decode batch` scheduler line (observability.md §1a).

Every variant is read by splitting the body into `key: value` pairs instead of one rigid regex,
because the field set drifts between versions: `.` vs `,` after `Decode batch`, an optional
` [N]` iteration counter, `#token`/`token usage` or the hybrid `#full token`/`#swa token`/
`mamba` fields, `accept rate` missing before Oct 2025, the graph label (`cuda`/`cpu`/`npu`/
`musa graph`), optional PD and MFU fields, and a trailing `, ` in older builds.
"""

from __future__ import annotations

import re

from specscope.telemetry.base import LineFormat, Malformed, Parsed, integer, number
from specscope.telemetry.prefix import PrefixParser

MARKER = "Decode batch"
_HEAD = re.compile(r"Decode batch(?: \[(?P<iter>\d+)\])?[.,]\s*")
_KEY_NAMES = {
    "#running-req": "running_req",
    "#token": "token",
    "token usage": "token_usage",
    "#full token": "full_token",
    "full token usage": "full_token_usage",
    "#swa token": "swa_token",
    "swa token usage": "swa_token_usage",
    "mamba num": "mamba_num",
    "mamba usage": "mamba_usage",
    "accept len": "accept_len",
    "accept rate": "accept_rate",
    "gen throughput (token/s)": "gen_throughput",
    "#queue-req": "queue_req",
    "pre-allocated usage": "prealloc_usage",
    "#prealloc-req": "prealloc_req",
    "#transfer-req": "transfer_req",
    "#retracted-req": "retracted_req",
    "fwd occupancy": "fwd_occupancy",
}


def _field_name(key: str) -> str:
    name = _KEY_NAMES.get(key)
    if name:
        return name
    return re.sub(r"[^0-9a-z]+", "_", key.lower()).strip("_") or "field"


def parse_sglang_decode(line: str, prefixes: PrefixParser) -> Parsed | Malformed | None:
    """One `Decode batch` line -> SpecRecord kwargs (format `sglang_decode`, scope interval)."""
    at = line.find(MARKER)
    if at < 0:
        return None
    head = _HEAD.match(line, at)
    if head is None:
        return Malformed("sglang_decode", "no '.' or ',' after 'Decode batch'")
    fields: dict[str, object] = {}
    if head.group("iter"):
        fields["iter"] = int(head.group("iter"))
    for part in line[head.end() :].split(", "):
        key, sep, value = part.partition(": ")
        key = key.strip()
        if not sep or not key:
            continue
        value = value.strip().rstrip(",").strip()
        name = _field_name(key)
        if key.endswith(" graph"):
            fields["graph"] = key[: -len(" graph")]
            fields["graph_used"] = value == "True"
        elif key.startswith("#") or key == "mamba num":
            fields[name] = integer(value)
        else:
            fields[name] = number(value)
    if not isinstance(fields.get("running_req"), int):
        return Malformed("sglang_decode", "no '#running-req: N'")
    pre = prefixes(line[:at])
    accept_len = fields.pop("accept_len", None)
    accept_rate = fields.pop("accept_rate", None)
    return {
        "format": "sglang_decode",
        "ts": pre.ts,
        "rank": pre.rank,
        "commit_len": accept_len,
        "accepted_drafts": None if accept_len is None else accept_len - 1.0,
        "accept_rate": accept_rate,
        "scope": "interval",
        "fields": fields,
    }


SGLANG_DECODE = LineFormat("sglang_decode", "sglang", (MARKER.encode(),), parse_sglang_decode)
