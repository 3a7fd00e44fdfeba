"""A plan: every request an experiment will send, stated before anything is sent.

The command prints the plan first (what, how many tokens, how long) so the user can stop it
before it costs anything; points that cannot run as asked (prompt + output beyond the server's
context) are listed as skipped with the reason, never silently shrunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specscope.trace import tags

# Assumed rates before anything is measured; replaced by a calibration request's numbers.
DEFAULT_DECODE_TPS = 50.0
DEFAULT_PREFILL_TPS = 2000.0
# Seconds a diagnosis takes after its last request: the server's evidence read, the analysis,
# both reports written, the embedded server stopped (2-4 s on this 2-core machine for the twin's
# seed-regression and the engine's demo run; rounded up).
FINISH_S = 5.0


@dataclass
class PlanStep:
    """One point of one experiment: `repeat` rounds of `concurrency` identical requests."""

    experiment: str
    point: str | None
    prompt_tokens: int
    max_tokens: int
    repeat: int = 1
    concurrency: int = 1
    purpose: str = ""
    # Steps that belong together (a two-point pair); every step draws the same prompt content
    # (the executor asks with one seed) and each request's prompt is still unique where the
    # target makes it so.
    group: str = ""
    # Workload category to draw the prompt from (None: the target's own choice).
    category: str | None = None

    @property
    def tag(self) -> str:
        return tags.make(self.experiment, self.point)

    @property
    def requests(self) -> int:
        return self.repeat * self.concurrency

    @property
    def generated_tokens(self) -> int:
        return self.requests * self.max_tokens

    def estimate_s(self, decode_tps: float, prefill_tps: float) -> float:
        """Seconds for this step at the given rates (concurrent requests overlap)."""
        one = self.prompt_tokens / max(prefill_tps, 1e-9) + self.max_tokens / max(decode_tps, 1e-9)
        return self.repeat * one


@dataclass
class SkippedPoint:
    experiment: str
    point: str | None
    reason: str


@dataclass(frozen=True)
class PrecisionPlan:
    """Adaptive repeats of one measurement after the plan: more of the step tagged `tag` until
    decode tps' 95% interval is within +-`target` (relative half-width, over requests) or the
    budget is spent. target 0: off."""

    target: float
    budget_s: float | None  # seconds the repeats may add (None: no time limit)
    budget_tokens: int | None  # generated tokens they may add (None: no token limit)
    max_requests: int  # of the measurement, the plan's own included
    start_requests: int  # the plan's own requests of the measurement
    tag: str
    # Seconds from the command's start by which the repeats must have ended (--quick: the
    # whole command's time bound), or None: the budget alone bounds them.
    deadline_s: float | None = None

    def to_dict(self) -> dict:
        return {
            "target": self.target,
            "budget_s": self.budget_s,
            "budget_tokens": self.budget_tokens,
            "max_requests": self.max_requests,
            "start_requests": self.start_requests,
            "tag": self.tag,
            "deadline_s": self.deadline_s,
        }


@dataclass
class Plan:
    steps: list[PlanStep] = field(default_factory=list)
    skipped: list[SkippedPoint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    decode_tps_assumed: float = DEFAULT_DECODE_TPS
    prefill_tps_assumed: float = DEFAULT_PREFILL_TPS
    rates_measured: bool = False
    precision: PrecisionPlan | None = None
    # Set when the plan is announced: the seconds the command had already run (start-up, the
    # calibration request) and the seconds the precision repeats are expected to add
    # (precision_loop.expected_repeats_s).
    elapsed_s: float = 0.0
    repeats_s: float = 0.0

    def extend(self, other: Plan) -> None:
        self.steps.extend(other.steps)
        self.skipped.extend(other.skipped)
        self.notes.extend(other.notes)

    @property
    def total_requests(self) -> int:
        return sum(s.requests for s in self.steps)

    @property
    def total_generated_tokens(self) -> int:
        return sum(s.generated_tokens for s in self.steps)

    @property
    def total_prompt_tokens(self) -> int:
        return sum(s.requests * s.prompt_tokens for s in self.steps)

    def estimate_s(self) -> float:
        """Seconds for the plan's steps at the assumed rates."""
        return sum(
            s.estimate_s(self.decode_tps_assumed, self.prefill_tps_assumed) for s in self.steps
        )

    def total_estimate_s(self) -> float:
        """Seconds for the whole command, which is what a user waits for: what already ran, the
        steps, the repeats, and the analysis and reports after the last request."""
        return self.elapsed_s + self.estimate_s() + self.repeats_s + FINISH_S

    def calibrate(self, decode_tps: float | None, prefill_tps: float | None) -> None:
        """Replace the assumed rates with measured ones (from a short calibration request)."""
        if decode_tps and decode_tps > 0:
            self.decode_tps_assumed = decode_tps
            self.rates_measured = True
        if prefill_tps and prefill_tps > 0:
            self.prefill_tps_assumed = prefill_tps

    def to_dict(self) -> dict:
        """The plan as recorded in run.json args (so a run states its own parameters)."""
        return {
            "steps": [
                {
                    "tag": s.tag,
                    "prompt_tokens": s.prompt_tokens,
                    "max_tokens": s.max_tokens,
                    "repeat": s.repeat,
                    "concurrency": s.concurrency,
                    "purpose": s.purpose,
                }
                for s in self.steps
            ],
            "skipped": [
                {"tag": tags.make(k.experiment, k.point), "reason": k.reason} for k in self.skipped
            ],
            "notes": list(self.notes),
            "estimated_s": round(self.estimate_s(), 1),
            "estimated_total_s": round(self.total_estimate_s(), 1),
            "estimated_repeats_s": round(self.repeats_s, 1),
            "elapsed_at_plan_s": round(self.elapsed_s, 1),
            "decode_tps_assumed": round(self.decode_tps_assumed, 2),
            "rates_measured": self.rates_measured,
            "precision": self.precision.to_dict() if self.precision is not None else None,
        }


def fits_context(prompt_tokens: int, max_tokens: int, max_context: int | None) -> bool:
    return max_context is None or prompt_tokens + max_tokens <= max_context


def context_skip_reason(prompt_tokens: int, max_tokens: int, max_context: int) -> str:
    return (
        f"prompt {prompt_tokens} + output {max_tokens} tokens exceeds the server's context "
        f"of {max_context} tokens; point skipped (not shrunk)"
    )
