"""Request tags: which experiment (and which point of it) a request belongs to.

`RequestSpec.tag` is `<experiment>` or `<experiment>:<point>`; analysis groups requests by it.
"""

from __future__ import annotations

PROBE = "probe"
FULL_GENERATION = "full_generation"
TWO_POINT = "two_point"  # points: "n1", "n2"
CONTEXT_SWEEP = "context_sweep"  # point: the prompt length, e.g. "context_sweep:2048"
OUTPUT_SWEEP = "output_sweep"  # point: max_tokens, e.g. "output_sweep:1024"
CONCURRENCY_SWEEP = "concurrency_sweep"  # point: concurrency, e.g. "concurrency_sweep:4"
CALIBRATION = "calibration"  # diagnose's short sizing request before the plan
WORKLOAD_MIX = "workload_mix"  # point: the workload category, e.g. "workload_mix:reasoning"


def make(experiment: str, point: str | int | None = None) -> str:
    return experiment if point is None else f"{experiment}:{point}"


def split(tag: str) -> tuple[str, str | None]:
    experiment, _, point = tag.partition(":")
    return experiment, (point or None)
