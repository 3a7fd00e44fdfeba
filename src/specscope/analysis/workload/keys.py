"""The workload's part of a probe summary: per-category table, repetition loops, prefix-cache
evidence and where the text was routed. One call, so the summary's owner adds one line. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specscope.analysis.steps.reconstruct import StepReconstruction
from specscope.analysis.workload.by_category import category_table, looping_requests
from specscope.analysis.workload.prefix_cache import prefix_cache
from specscope.analysis.workload.routing import routing
from specscope.trace import tags
from specscope.trace.model import RequestTrace


def workload_keys(
    traces: Sequence[RequestTrace], reconstructions: Sequence[StepReconstruction] | None = None
) -> dict[str, Any]:
    """`by_category` (rows; [] without categories), `repetition_loops` (requests whose output
    ends in a loop), `prefix_cache` (contract key), `delta_fields` (generated tokens by field)."""
    return {
        "by_category": category_table(traces, reconstructions),
        "repetition_loops": looping_requests(traces),
        "prefix_cache": prefix_cache(traces),
        "delta_fields": routing(traces)["tokens"] or None,
    }


def diagnosis_workload_keys(traces: Sequence[RequestTrace]) -> dict[str, Any]:
    """The same keys for a diagnosis run. Its per-category table comes from the workload-mix
    requests (one shape for every category) when the plan had them: the main experiments use
    one category at many shapes, so a table over them would compare shapes, not content."""
    mix = [t for t in traces if tags.split(t.spec.tag)[0] == tags.WORKLOAD_MIX]
    out = workload_keys(traces)
    if mix:
        out["by_category"] = category_table(mix)
        out["by_category_from"] = tags.WORKLOAD_MIX
    return out
