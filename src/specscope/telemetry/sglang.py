"""SGLang's periodic `Decode batch` scheduler line (observability.md §1a).

Every variant is read by splitting the body into `key: value` pairs instead of one rigid regex,
because the field set drifts between versions: `.` vs `,` after `Decode batch`, an optional
` [N]` iteration counter, `#token`/`token usage` or the hybrid `#full token`/`#swa token`/
`mamba` fields, `accept rate` missing before Oct 2025, the graph label (`cuda`/`cpu`/`npu`/
`musa graph`), optional PD and MFU fields, and a trailing `, ` in older builds.

`SglangFastLine` is its line fast path (scan.LineFastPath: one bytes regex for the canonical
shape, used when only the summary is wanted; any other line goes to the general parser).
"""

from __future__ import annotations

import re

from specscope.telemetry.prefix import PrefixParser, local_unix, split_ranks
from specscope.telemetry.records import PLAIN_NUMBER, Malformed, Parsed, integer, number
from specscope.telemetry.scan import FastResult, LineFormat

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


_NUM = rb"(" + PLAIN_NUMBER + rb")"
# Printable ASCII before the stamp, holding no other `[YYYY-` (the general prefix parser takes
# the first SGLang stamp of the line).
_PRE = rb"(?:[\x20-\x5a\x5c-\x7e]|\[(?!\d{4}-))*"
_CANONICAL = re.compile(
    _PRE
    + rb"\[(\d{4})-(\d\d)-(\d\d) (\d\d:\d\d:\d\d)((?: [A-Z]+\d+)*)\] "
    + rb"(Decode batch)[.,] #running-req: (\d+), #token: \d+, token usage: \d+(?:\.\d+)?, "
    + rb"(?:accept len: "
    + _NUM
    + rb", )?(?:accept rate: "
    + _NUM
    + rb", )?"
    + rb"(?:[a-z]+ graph: (?:True|False), )?"
    + rb"gen throughput \(token/s\): "
    + _NUM
    + rb", #queue-req: (\d+)(?:, )? *"
)


class SglangFastLine:
    """The fast path of a canonical `Decode batch` line (see the module's docstring)."""

    def __init__(self, prefixes: PrefixParser) -> None:
        self.prefixes = prefixes
        self._rank: dict[bytes, str | None] = {}
        self._minutes: dict[tuple[bytes, ...], float | None] = {}

    def _ts_of(self, y: bytes, mo: bytes, d: bytes, hms: bytes) -> float | None:
        """`local_unix` of the stamp, its minute cached (consecutive lines share it): minute
        start + seconds is the float `local_unix` computes."""
        minute = (y, mo, d, hms[:5])
        base = self._minutes.get(minute, -1.0)
        if base == -1.0:
            if len(self._minutes) > 100_000:
                self._minutes.clear()
            base = self._minutes[minute] = local_unix(
                int(y), int(mo), int(d), hms[:5].decode("ascii") + ":00"
            )
        sec = int(hms[6:])
        return None if base is None or sec > 59 else base + sec

    def _rank_of(self, label: bytes) -> str | None:
        rank = self._rank.get(label, "")
        if rank == "":
            rank = self._rank[label] = split_ranks(label.decode("ascii"))[0]
        return rank

    def __call__(self, block: bytes, ls: int, le: int, at: int) -> FastResult | None:
        m = _CANONICAL.fullmatch(block, ls, le)
        if m is None or m.start(6) != at:
            return None
        y, mo, d, hms, label, _, running, acc_len, acc_rate, gen, queue = m.groups()
        key = (
            "sglang_decode",
            None if acc_len is None else float(acc_len),
            None if acc_rate is None else float(acc_rate),
            int(running),
            float(gen),
            int(queue),
        )
        return self._ts_of(y, mo, d, hms), self._rank_of(label), key

    def parsed(self, key: tuple) -> Parsed:
        _, commit, rate, running, gen, queue = key
        return {
            "format": "sglang_decode",
            "commit_len": commit,
            "accepted_drafts": None if commit is None else commit - 1.0,
            "accept_rate": rate,
            "scope": "interval",
            "fields": {"running_req": running, "gen_throughput": gen, "queue_req": queue},
        }


SGLANG_DECODE = LineFormat(
    "sglang_decode", "sglang", (MARKER.encode(),), parse_sglang_decode, line_fast=SglangFastLine
)
