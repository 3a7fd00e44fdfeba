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


# Where a drafter's stated window W lies inside the generation's span, prompts either side of it:
# whole requests below W (prompt + output <= W) and requests that start above it.
WINDOW_BELOW = (0.5, 0.75)
WINDOW_ABOVE = (1.25, 1.5, 2.0)
MIN_WINDOW_POINT = 64


def window_points(window: int, span_end: int, max_tokens: int) -> list[int]:
    """Prompt lengths either side of a drafter's window W that the server states, when the
    user's generation (up to `span_end` tokens of context) crosses it; [] otherwise.

    Why: a cliff at W is told from text that is harder at that length only by several requests
    on each side of it (one prompt below W is one text), and the default points (256, P, P+G)
    can leave a single request below it. The requests below W end below it (prompt + output),
    those above start above it, so each sees one side only."""
    if window <= 0 or window >= span_end:
        return []
    below = [round(f * window) for f in WINDOW_BELOW]
    below = [p for p in below if p >= MIN_WINDOW_POINT and p + max_tokens <= window]
    above = [round(f * window) for f in WINDOW_ABOVE]
    return sorted({*below, *above})


def plan(
    points: list[int],
    max_tokens: int = 128,
    repeat: int = 1,
    max_context: int | None = None,
    window: int | None = None,
) -> Plan:
    """A step per point (and per `window` point, purpose said); points that do not fit the
    server's context are skipped with the reason."""
    out = Plan()
    window_pts = set(window_points(window, max(points), max_tokens)) if window and points else set()
    for p in sorted({*points, *window_pts}):
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
                purpose=(
                    f"acceptance {'below' if p < (window or 0) else 'above'} the stated "
                    f"{window}-token draft window"
                    if p in window_pts and p not in points
                    else f"decode rate at context {p}"
                ),
            )
        )
    return out
