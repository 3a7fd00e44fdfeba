"""Two-point decode rate: same prompt, max_tokens N1 and N2, rate = (N2 - N1) / (T2 - T1).

The difference cancels prefill, queueing and network, and does not depend on how the server
chunks its stream. It measures only the window N1..N2 (report it): a short window over the easy
early tokens overstates a long generation (the seed story's 113 vs 32 t/s).
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


def plan(
    prompt_tokens: int, n1: int = 64, n2: int = 256, repeat: int = 3, max_context: int | None = None
) -> Plan:
    """Alternating N1/N2 requests (N1, N2, N1, N2, ...) so slow drift hits both sides alike."""
    if n2 <= n1:
        raise ValueError(f"two_point needs n2 > n1 (got n1={n1}, n2={n2})")
    out = Plan()
    if not fits_context(prompt_tokens, n2, max_context):
        for p in ("n1", "n2"):
            out.skipped.append(
                SkippedPoint(
                    tags.TWO_POINT, p, context_skip_reason(prompt_tokens, n2, max_context or 0)
                )
            )
        return out
    group = f"two_point:{prompt_tokens}"
    for _ in range(repeat):
        for point, n in (("n1", n1), ("n2", n2)):
            out.steps.append(
                PlanStep(
                    tags.TWO_POINT,
                    point,
                    prompt_tokens,
                    n,
                    repeat=1,
                    group=group,
                    purpose=f"decode rate over tokens {n1}..{n2}, prefill cancelled",
                )
            )
    return out
