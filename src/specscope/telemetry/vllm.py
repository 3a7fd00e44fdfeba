"""vLLM's periodic `SpecDecoding metrics:` log line (observability.md §2a).

Fields are found one by one (not by position) because their order changed between releases:
Sept-2025 builds start with `Draft acceptance rate: x%`, newer ones end with
`Avg Draft acceptance rate: x%`. The per-position list may contain `…` where a report
abbreviated it; those entries are skipped.

`VllmFastLine` is its line fast path (scan.LineFastPath: one bytes regex for the canonical
shape, used when only the summary is wanted; any other line goes to the general parser).
"""

from __future__ import annotations

import re

from specscope.telemetry.commit import DRAFTED_STEPS
from specscope.telemetry.prefix import PrefixParser
from specscope.telemetry.records import PLAIN_NUMBER, Malformed, Parsed, float_list, number
from specscope.telemetry.scan import FastResult, LineFormat

MARKER = "SpecDecoding metrics"
_PROCESS = re.compile(r"\((?P<proc>[\w.-]+) pid=(?P<pid>\d+)\)")
_FIELDS = {
    "mean_acceptance_length": re.compile(r"Mean acceptance length: (\S+?),?(?:\s|$)"),
    "accepted_throughput": re.compile(r"Accepted throughput: (\S+?) tokens/s"),
    "drafted_throughput": re.compile(r"Drafted throughput: (\S+?) tokens/s"),
    "accepted_tokens": re.compile(r"\bAccepted: (\d+) tokens"),
    "drafted_tokens": re.compile(r"\bDrafted: (\d+) tokens"),
    "draft_acceptance_pct": re.compile(r"Draft acceptance rate: (\S+?)%"),
}
_PER_POSITION = re.compile(r"Per-position acceptance rate: ([^A-Za-z]*)")


def parse_vllm_spec(line: str, prefixes: PrefixParser) -> Parsed | Malformed | None:
    """One `SpecDecoding metrics:` line -> SpecRecord kwargs (format `vllm_spec`, interval)."""
    at = line.find(MARKER)
    if at < 0:
        return None
    body = line[at:]
    fields: dict[str, object] = {}
    for name, rx in _FIELDS.items():
        m = rx.search(body)
        if m:
            value = number(m.group(1))
            if value is not None:
                fields[name] = int(value) if name.endswith("_tokens") else value
    per_pos_m = _PER_POSITION.search(body)
    per_position = float_list(per_pos_m.group(1)) if per_pos_m else None
    mean_al = fields.pop("mean_acceptance_length", None)
    pct = fields.pop("draft_acceptance_pct", None)
    if mean_al is None and pct is None:
        return Malformed("vllm_spec", "no 'Mean acceptance length' or 'Draft acceptance rate'")
    accepted = fields.get("accepted_tokens")
    n_steps = None
    if isinstance(mean_al, float) and mean_al > 1.0 and isinstance(accepted, int):
        # num_drafts = accepted / (AL - 1); AL is printed with 2 decimals, so this is rounded.
        n_steps = round(accepted / (mean_al - 1.0))
        fields["n_steps_estimated"] = True
    fields["commit_len_basis"] = DRAFTED_STEPS  # spec steps only (reference/vllm-cpu.md §7)
    proc = _PROCESS.search(line, 0, at)
    if proc:
        fields["process"] = proc.group("proc")
        fields["pid"] = int(proc.group("pid"))
    pre = prefixes(line[:at])
    return {
        "format": "vllm_spec",
        "ts": pre.ts,
        "rank": pre.rank,
        "commit_len": mean_al,
        "accepted_drafts": None if mean_al is None else mean_al - 1.0,  # type: ignore[operator]
        "accept_rate": None if pct is None else pct / 100.0,  # type: ignore[operator]
        "n_steps": n_steps,
        "per_position": per_position or None,
        "scope": "interval",
        "fields": fields,
    }


_NUM = rb"(" + PLAIN_NUMBER + rb")"
_CANONICAL = re.compile(
    rb"[\x20-\x7e]*?(SpecDecoding metrics): Mean acceptance length: "
    + _NUM
    + rb", Accepted throughput: \d+(?:\.\d+)? tokens/s, Drafted throughput: \d+(?:\.\d+)? tokens/s, "
    + rb"Accepted: (\d+) tokens, Drafted: \d+ tokens, "
    + rb"Per-position acceptance rate: ("
    + PLAIN_NUMBER
    + rb"(?:, "
    + PLAIN_NUMBER
    + rb")*), "
    + rb"Avg Draft acceptance rate: "
    + _NUM
    + rb"% *"
)


class VllmFastLine:
    """The fast path of a canonical `SpecDecoding metrics` line (see the module's docstring)."""

    def __init__(self, prefixes: PrefixParser) -> None:
        self.prefixes = prefixes

    def __call__(self, block: bytes, ls: int, le: int, at: int) -> FastResult | None:
        m = _CANONICAL.fullmatch(block, ls, le)
        if m is None or m.start(1) != at:
            return None
        _, mean, accepted_s, per_pos, pct = m.groups()
        mean_al = float(mean)
        key = (
            "vllm_spec",
            mean_al,
            float(pct) / 100.0,
            round(int(accepted_s) / (mean_al - 1.0)) if mean_al > 1.0 else None,
            tuple(float(v) for v in per_pos.split(b", ")),
        )
        pre = self.prefixes(block[ls:at].decode("ascii"))
        return pre.ts, pre.rank, key

    def parsed(self, key: tuple) -> Parsed:
        _, mean_al, rate, n_steps, per_pos = key
        return {
            "format": "vllm_spec",
            "commit_len": mean_al,
            "accepted_drafts": mean_al - 1.0,
            "accept_rate": rate,
            "n_steps": n_steps,
            "per_position": list(per_pos),
            "scope": "interval",
            "fields": {"commit_len_basis": DRAFTED_STEPS},
        }


VLLM_SPEC = LineFormat(
    "vllm_spec", "vllm", (MARKER.encode(),), parse_vllm_spec, line_fast=VllmFastLine
)
