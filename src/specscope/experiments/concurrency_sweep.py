"""Concurrency sweep: C identical requests in flight at once, for C = 1, 2, 4, ...

Per-request decode rate against C shows batching interference (a step over a bigger batch takes
longer, and acceptance may change with it)."""

from __future__ import annotations

from specscope.experiments.plan import (
    Plan,
    PlanStep,
    SkippedPoint,
    context_skip_reason,
    fits_context,
)
from specscope.trace import tags


def plan(
    levels: list[int],
    prompt_tokens: int,
    max_tokens: int,
    repeat: int = 1,
    max_context: int | None = None,
) -> Plan:
    out = Plan()
    for c in levels:
        if c < 1:
            raise ValueError(f"concurrency must be >= 1 (got {c})")
        if not fits_context(prompt_tokens, max_tokens, max_context):
            out.skipped.append(
                SkippedPoint(
                    tags.CONCURRENCY_SWEEP,
                    str(c),
                    context_skip_reason(prompt_tokens, max_tokens, max_context or 0),
                )
            )
            continue
        out.steps.append(
            PlanStep(
                tags.CONCURRENCY_SWEEP,
                str(c),
                prompt_tokens,
                max_tokens,
                repeat=repeat,
                concurrency=c,
                purpose=f"{c} requests in flight at once",
            )
        )
    return out
