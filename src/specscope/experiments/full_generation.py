"""Full generation: the user's real shape (prompt P tokens, generate G). TTFT, e2e, decode tps and
the per-step trace that the other experiments are compared against."""

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
    prompt_tokens: int, max_tokens: int, repeat: int = 1, max_context: int | None = None
) -> Plan:
    out = Plan()
    if not fits_context(prompt_tokens, max_tokens, max_context):
        out.skipped.append(
            SkippedPoint(
                tags.FULL_GENERATION,
                None,
                context_skip_reason(prompt_tokens, max_tokens, max_context or 0),
            )
        )
        return out
    out.steps.append(
        PlanStep(
            tags.FULL_GENERATION,
            None,
            prompt_tokens,
            max_tokens,
            repeat=repeat,
            purpose="the user's case: TTFT, decode rate, steps",
        )
    )
    return out
