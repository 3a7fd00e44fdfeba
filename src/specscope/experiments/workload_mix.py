"""Workload mix: one short request per prompt category, at one shape, so commit length can be
compared across categories (code edits vs free-form writing vs reasoning) without the shape
changing with them. The main experiments keep one category so that their comparisons (two-point
vs full, context sweep) are not confounded by content."""

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
    categories: list[str],
    prompt_tokens: int,
    max_tokens: int,
    repeat: int = 1,
    max_context: int | None = None,
) -> Plan:
    out = Plan()
    for cat in categories:
        if not fits_context(prompt_tokens, max_tokens, max_context):
            out.skipped.append(
                SkippedPoint(
                    tags.WORKLOAD_MIX,
                    cat,
                    context_skip_reason(prompt_tokens, max_tokens, max_context or 0),
                )
            )
            continue
        out.steps.append(
            PlanStep(
                tags.WORKLOAD_MIX,
                cat,
                prompt_tokens,
                max_tokens,
                repeat=repeat,
                category=cat,
                purpose=f"commit length on {cat} prompts",
            )
        )
    return out
