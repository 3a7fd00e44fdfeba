"""The plan `specscope diagnose` runs: the seed story's method in one ordered list.

Default: the user's full generation (P, G), a two-point pair at the same prompt, a short context
sweep over the range the generation spans, and an output sweep from a short prompt. `quick`
keeps the user's full generation, trims the rest and bounds the precision repeats by the
command's QUICK_DEADLINE_S; every trim is written in the plan's notes.
"""

from __future__ import annotations

from specscope.experiments import (
    concurrency_sweep,
    context_sweep,
    full_generation,
    output_sweep,
    two_point,
    workload_mix,
)
from specscope.experiments.plan import Plan, PlanStep, PrecisionPlan
from specscope.trace import tags

# Precision of decode tps the repeats aim for (relative half-width of its 95% interval over
# requests) and the seconds they may add to the plan, by default. From bench/precision.py
# (--runs 40) on the twin with realistic noise at the default shape (2700 -> 1500 tokens,
# ~130 tok/s, requests differing by cv ~10% in rate through their content): the 8-request
# minimum of an interval over requests reads +-6.7% (median; 90th percentile +-9.5%), so
# --quick's +-10% within 120 s stops on precision in 85% of runs (median 8 requests, ~90 s);
# +-5% takes a median of 21 requests (~4 min): a full run's 300 s reach it in 57% of runs and
# say "stopped by the budget" in the rest (600 s: 92%). A slower server or a wider spread
# between prompts stops on the budget, and the report says so (a llama.cpp peer on this
# machine: cv 20% between long-writing requests, so +-5% would need ~60).
DEFAULT_PRECISION = {True: 0.10, False: 0.05}  # by `quick`
DEFAULT_BUDGET_S = {True: 120.0, False: 300.0}
MAX_PRECISION_REQUESTS = 64
# --quick's promise: the whole command in about this many seconds. The plan's steps run whole
# (they are what the diagnosis reads); the precision repeats get what the steps leave, unless
# --budget-s says otherwise. A server whose full generation alone takes longer overruns it, and
# the plan says so before anything is sent.
QUICK_DEADLINE_S = 90.0


def calibration_step(prompt_tokens: int, max_context: int | None) -> PlanStep:
    """One short request at the user's prompt length: checks the server answers and measures
    rough prefill and decode rates for the plan's time estimate (recorded, tagged apart)."""
    p = prompt_tokens if max_context is None or prompt_tokens + 32 <= max_context else 128
    return PlanStep(tags.CALIBRATION, None, p, 32, purpose="check the server, estimate rates")


def build(
    prompt_tokens: int = 2700,
    max_tokens: int = 1500,
    quick: bool = False,
    repeat: int = 1,
    max_context: int | None = None,
    concurrency_levels: list[int] | None = None,
    categories: list[str] | None = None,
    precision: float | None = None,
    budget_s: float | None = None,
    budget_tokens: int | None = None,
    draft_window: int | None = None,
) -> Plan:
    """`categories` (more than one): end with a workload mix, one request per category.
    `draft_window`: the window the server states for its drafter; where the generation crosses
    it, the context sweep adds prompts on each side of it (context_sweep.window_points).
    `precision` (default by `quick`; 0 = off), `budget_s` (default by `quick`) and
    `budget_tokens` (default: no limit) bound the full generation's adaptive repeats."""
    if prompt_tokens < 1 or max_tokens < 2:
        raise ValueError("prompt tokens must be >= 1 and max tokens >= 2")
    out = Plan()
    out.extend(
        full_generation.plan(prompt_tokens, max_tokens, repeat=repeat, max_context=max_context)
    )
    if out.steps:  # the full generation fits the context: its decode tps is the figure
        out.precision = PrecisionPlan(
            target=DEFAULT_PRECISION[quick] if precision is None else precision,
            budget_s=DEFAULT_BUDGET_S[quick] if budget_s is None else budget_s,
            budget_tokens=budget_tokens,
            max_requests=max(MAX_PRECISION_REQUESTS, repeat),
            start_requests=out.steps[0].requests,
            tag=out.steps[0].tag,
            deadline_s=QUICK_DEADLINE_S if quick and budget_s is None else None,
        )

    if quick:
        n1, n2, tp_repeat = 32, 128, max(2, repeat)
    else:
        n1, n2, tp_repeat = 64, 256, max(3, repeat)
    n2 = min(n2, max_tokens) if max_tokens > n1 + 16 else n2
    out.extend(two_point.plan(prompt_tokens, n1, n2, repeat=tp_repeat, max_context=max_context))

    sweep_tokens = 64 if quick else 128
    out.extend(
        context_sweep.plan(
            context_sweep.default_points(prompt_tokens, max_tokens, quick),
            max_tokens=sweep_tokens,
            repeat=repeat,
            max_context=max_context,
            window=draft_window,
        )
    )

    if out.precision is not None and out.precision.deadline_s and out.precision.target > 0:
        out.notes.append(
            f"--quick: about {QUICK_DEADLINE_S:.0f} s in all; the full generation is repeated "
            "(for decode tps within the target) only while that fits, so on a slow server tps' "
            "interval is over fewer requests and a one-request slowdown is harder to tell from "
            "the server's (--budget-s S: the repeats' own time)"
        )
    if quick:
        n = max(max_tokens // 2, 64)
        out.notes.append(
            f"--quick: output sweep generates {n} tokens (half of {max_tokens}); "
            "run without --quick for the full length"
        )
        out.extend(output_sweep.plan([n], repeat=1, max_context=max_context))
    else:
        out.extend(
            output_sweep.plan(
                output_sweep.default_points(max_tokens), repeat=repeat, max_context=max_context
            )
        )

    if categories and len(categories) > 1:
        mix_prompt, mix_tokens = min(prompt_tokens, 512), min(max_tokens, 128 if quick else 256)
        out.notes.append(
            f"workload mix: one {mix_prompt}-token prompt per category "
            f"({', '.join(categories)}), {mix_tokens} tokens each"
        )
        out.extend(
            workload_mix.plan(
                categories, mix_prompt, mix_tokens, repeat=repeat, max_context=max_context
            )
        )

    if concurrency_levels:
        out.extend(
            concurrency_sweep.plan(
                concurrency_levels,
                prompt_tokens=min(prompt_tokens, 512),
                max_tokens=min(max_tokens, 256),
                repeat=repeat,
                max_context=max_context,
            )
        )
    return out
