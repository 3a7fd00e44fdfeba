"""The plan `specscope diagnose` runs: the seed story's method in one ordered list.

Default: the user's full generation (P, G), a two-point pair at the same prompt, a short context
sweep over the range the generation spans, and an output sweep from a short prompt. `quick`
keeps the user's full generation and trims the rest to about a minute; every trim is written in
the plan's notes.
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
from specscope.experiments.plan import Plan, PlanStep
from specscope.trace import tags


def calibration_step(prompt_tokens: int, max_context: int | None) -> PlanStep:
    """One short request at the user's prompt length: checks the server answers and measures
    rough prefill and decode rates for the plan's time estimate (recorded, tagged apart)."""
    p = prompt_tokens if max_context is None or prompt_tokens + 32 <= max_context else 128
    return PlanStep(tags.CALIBRATION, None, p, 32, purpose="check the server, estimate rates")


def build(prompt_tokens: int = 2700, max_tokens: int = 1500, quick: bool = False, repeat: int = 1,
          max_context: int | None = None, concurrency_levels: list[int] | None = None,
          categories: list[str] | None = None) -> Plan:
    """`categories` (more than one): end with a workload mix, one request per category."""
    if prompt_tokens < 1 or max_tokens < 2:
        raise ValueError("prompt tokens must be >= 1 and max tokens >= 2")
    out = Plan()
    out.extend(full_generation.plan(prompt_tokens, max_tokens, repeat=repeat, max_context=max_context))

    if quick:
        n1, n2, tp_repeat = 32, 128, max(2, repeat)
    else:
        n1, n2, tp_repeat = 64, 256, max(3, repeat)
    n2 = min(n2, max_tokens) if max_tokens > n1 + 16 else n2
    out.extend(two_point.plan(prompt_tokens, n1, n2, repeat=tp_repeat, max_context=max_context))

    sweep_tokens = 64 if quick else 128
    out.extend(context_sweep.plan(context_sweep.default_points(prompt_tokens, max_tokens, quick),
                                  max_tokens=sweep_tokens, repeat=repeat, max_context=max_context))

    if quick:
        n = max(max_tokens // 2, 64)
        out.notes.append(f"--quick: output sweep generates {n} tokens (half of {max_tokens}); "
                         "run without --quick for the full length")
        out.extend(output_sweep.plan([n], repeat=1, max_context=max_context))
    else:
        out.extend(output_sweep.plan(output_sweep.default_points(max_tokens), repeat=repeat,
                                     max_context=max_context))

    if categories and len(categories) > 1:
        mix_prompt, mix_tokens = min(prompt_tokens, 512), min(max_tokens, 128 if quick else 256)
        out.notes.append(f"workload mix: one {mix_prompt}-token prompt per category "
                         f"({', '.join(categories)}), {mix_tokens} tokens each")
        out.extend(workload_mix.plan(categories, mix_prompt, mix_tokens, repeat=repeat,
                                     max_context=max_context))

    if concurrency_levels:
        out.extend(concurrency_sweep.plan(concurrency_levels, prompt_tokens=min(prompt_tokens, 512),
                                          max_tokens=min(max_tokens, 256), repeat=repeat,
                                          max_context=max_context))
    return out
