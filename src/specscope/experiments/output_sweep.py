"""Output sweep: a short prompt and long generations, so output position varies while context
stays low. Step time that still grows here is not the context's doing (fragmentation, memory
pressure); commit length that falls here is the early tokens' honeymoon ending."""

from __future__ import annotations

from specscope.experiments.plan import (
    Plan,
    PlanStep,
    SkippedPoint,
    context_skip_reason,
    fits_context,
)
from specscope.trace import tags

SHORT_PROMPT_TOKENS = 128


def default_points(max_tokens: int, quick: bool = False) -> list[int]:
    return [max_tokens] if quick else sorted({max(max_tokens // 4, 32), max_tokens})


def plan(
    points: list[int],
    prompt_tokens: int = SHORT_PROMPT_TOKENS,
    repeat: int = 1,
    max_context: int | None = None,
) -> Plan:
    out = Plan()
    for n in points:
        if not fits_context(prompt_tokens, n, max_context):
            out.skipped.append(
                SkippedPoint(
                    tags.OUTPUT_SWEEP,
                    str(n),
                    context_skip_reason(prompt_tokens, n, max_context or 0),
                )
            )
            continue
        out.steps.append(
            PlanStep(
                tags.OUTPUT_SWEEP,
                str(n),
                prompt_tokens,
                n,
                repeat=repeat,
                purpose=f"{n} tokens from a {prompt_tokens}-token prompt",
            )
        )
    return out
