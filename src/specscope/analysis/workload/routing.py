"""Where generated text went (delta fields), and what changed between two runs. Pure.

The seed story's trigger was turning on reasoning and tool-call parsers: the same tokens then
stream in `reasoning_content` or `tool_calls` instead of `content`. A client that counted only
`content` would see a throughput collapse that never happened. `what_changed` answers the
question a user asks of a parsers-on vs parsers-off comparison: did acceptance, step time or
TTFT change, or only the text's routing?

A factor counts as changed when it is more than MATERIAL away from 1 and, when the comparison
has its 95% interval, that interval excludes 1 (significant and material; the rule is stated). Routing changed
when any field's share of generated tokens moved by more than ROUTING_SHIFT.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from specscope.trace.model import RequestTrace

MATERIAL = 0.05
TTFT_MATERIAL = 0.10
ROUTING_SHIFT = 0.05


def routing(traces: Sequence[RequestTrace]) -> dict[str, Any]:
    """{"tokens": {field: n}, "share": {field: fraction}} over successful requests."""
    total: Counter[str] = Counter()
    for t in traces:
        if t.ok and t.delta_fields:
            total.update(t.delta_fields)
    n = sum(total.values())
    return {"tokens": dict(total), "share": {k: v / n for k, v in total.items()} if n else {}}


def _changed(factor: float | None, ci: Any, material: float) -> bool | None:
    if factor is None:
        return None
    if isinstance(ci, list | tuple) and len(ci) == 2 and None not in ci:
        return not (ci[0] <= 1.0 <= ci[1]) and abs(factor - 1.0) > material
    return abs(factor - 1.0) > material


def what_changed(
    comparison: dict[str, Any],
    a: Sequence[RequestTrace],
    b: Sequence[RequestTrace],
    ttft_a: float | None,
    ttft_b: float | None,
) -> dict[str, Any]:
    """A verdict over a compare's factors and both runs' traces (A the baseline)."""
    ra, rb = routing(a), routing(b)
    fields = sorted(set(ra["share"]) | set(rb["share"]))
    shifts = {f: rb["share"].get(f, 0.0) - ra["share"].get(f, 0.0) for f in fields}
    routed = bool(ra["share"] and rb["share"]) and any(
        abs(v) > ROUTING_SHIFT for v in shifts.values()
    )
    ttft_ratio = ttft_b / ttft_a if ttft_a and ttft_b is not None else None
    # the factors' intervals live in the comparison's `attribution` (B analysed against A)
    intervals = comparison.get("attribution") or comparison
    checks = {
        "acceptance": _changed(
            comparison.get("acceptance_factor"), intervals.get("acceptance_factor_ci"), MATERIAL
        ),
        "step_time": _changed(
            comparison.get("step_time_factor"), intervals.get("step_time_factor_ci"), MATERIAL
        ),
        "ttft": _changed(ttft_ratio, None, TTFT_MATERIAL),
        "routing": routed if ra["share"] and rb["share"] else None,
    }
    moved = [k for k, v in checks.items() if v]
    if not moved:
        verdict = "nothing material changed"
    elif moved == ["routing"]:
        verdict = "only the text's routing changed; acceptance, step time and TTFT did not"
    else:
        verdict = "changed: " + ", ".join(k.replace("_", " ") for k in moved)
    unknown = [k for k, v in checks.items() if v is None]
    if unknown:
        verdict += f" (unknown: {', '.join(k.replace('_', ' ') for k in unknown)})"
    return {
        "verdict": verdict,
        "changed": checks,
        "ttft_ratio": ttft_ratio,
        "routing_a": ra["share"],
        "routing_b": rb["share"],
        "routing_shift": shifts,
        "rule": (
            f"a factor changed when it is more than {MATERIAL:.0%} from 1 (TTFT "
            f"{TTFT_MATERIAL:.0%}) and its 95% interval, where known, excludes 1; "
            f"routing when a "
            f"field's share of tokens moved by more than {ROUTING_SHIFT:.0%}"
        ),
    }
