"""Context sweep: decode rate at several prompt lengths with a fixed short output.

Feeds the step-time model `s = s0 + a * context`; with the output sweep it separates what the
context explains from what output position does.
"""

from __future__ import annotations

from specscope.experiments.plan import (
    Plan,
    PlanStep,
    SkippedPoint,
    context_skip_reason,
    fits_context,
)
from specscope.trace import tags


def default_points(prompt_tokens: int, max_tokens: int, quick: bool = False) -> list[int]:
    """Cover the context range the user's generation spans (P .. P+G), plus a short anchor."""
    span_end = prompt_tokens + max_tokens
    pts = (
        [256, prompt_tokens, span_end]
        if quick
        else [
            256,
            max(prompt_tokens // 2, 257),
            prompt_tokens,
            (prompt_tokens + span_end) // 2,
            span_end,
        ]
    )
    return sorted({p for p in pts if p > 0})


def plan(
    points: list[int], max_tokens: int = 128, repeat: int = 1, max_context: int | None = None
) -> Plan:
    out = Plan()
    for p in points:
        if not fits_context(p, max_tokens, max_context):
            out.skipped.append(
                SkippedPoint(
                    tags.CONTEXT_SWEEP, str(p), context_skip_reason(p, max_tokens, max_context or 0)
                )
            )
            continue
        out.steps.append(
            PlanStep(
                tags.CONTEXT_SWEEP,
                str(p),
                p,
                max_tokens,
                repeat=repeat,
                purpose=f"decode rate at context {p}",
            )
        )
    return out
