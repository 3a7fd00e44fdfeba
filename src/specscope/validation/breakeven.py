"""Breakeven against the twin's truth: a speculative scenario and its plain baseline simulated as
continuous batches (virtual time), measured as a client records them, analysed by
analysis.breakeven, and set beside the scenario's exact crossovers (twin.model.breakeven_batch and
breakeven_context).
Used by the breakeven tests and bench/breakeven.py; imports the twin, so it lives outside
analysis/."""

from __future__ import annotations

from dataclasses import dataclass

from specscope.analysis.diagnosis.breakeven import Breakeven, breakeven
from specscope.analysis.headline.measure import measure
from specscope.twin import scenario as tw
from specscope.validation import virtual

# The shipped scenarios made for breakeven: each is judged against its own [baseline] across a
# concurrency sweep and a context sweep, not by the concurrency-1 accuracy suite
# (validation.accuracy), which leaves them out.
SCENARIOS = (
    "batch-verify-cost",
    "shared-drafter",
    "expensive-tree",
    "batch-headroom",
    "context-verify-cost",
)
LEVELS = (1, 2, 4, 8, 16)
PROMPT, OUTPUT = 512, 128
CONTEXT = PROMPT + OUTPUT // 2  # the concurrency sweep's median context
CONTEXTS, CONTEXT_OUTPUT = (256, 1024, 2048, 4096), 64  # the context sweep (batch 1)
CONTEXT_RANGE = (float(CONTEXTS[0]), float(CONTEXTS[-1] + CONTEXT_OUTPUT - 1))
BASELINE_SEED_OFFSET = 7919  # the baseline run draws other numbers than the observed one


@dataclass(frozen=True)
class AxisOutcome:
    """One breakeven axis of one run set beside the truth."""

    truth: float | None  # the true crossover in the measured range, None when there is none
    point: float | None
    ci: tuple[float | None, float | None] | None

    @property
    def within_20pct(self) -> bool:
        p = self.point
        return self.truth is not None and p is not None and abs(p - self.truth) <= 0.2 * self.truth

    @property
    def covered(self) -> bool:
        """The 95% interval holds the truth (an open end counts as holding it on that side)."""
        if self.truth is None or self.ci is None:
            return False
        lo, hi = self.ci
        return (lo is None or lo <= self.truth) and (hi is None or self.truth <= hi)

    @property
    def says_none(self) -> bool:
        """No crossover reported in the range (the right answer when the truth has none)."""
        return self.point is None


@dataclass(frozen=True)
class DraftsOutcome:
    """analysis.breakeven.fewer_drafts at the sweep's top batch beside the truth."""

    true_rates: list[float]  # k = 0..K drafts
    best: int  # the predicted best draft count
    gain: float  # predicted: its rate over the run's own - 1
    gain_ci: tuple[float, float] | None
    true_gain: float | None  # the truth's rate at `best` over its rate at K - 1

    @property
    def true_best(self) -> int:
        return int(max(range(len(self.true_rates)), key=self.true_rates.__getitem__))

    @property
    def right_choice(self) -> bool:
        """The chosen draft count's true rate is within 5% of the best one's."""
        return self.true_rates[self.best] >= 0.95 * max(self.true_rates)

    @property
    def within_20pct(self) -> bool:
        t = self.true_gain
        return t is not None and abs(self.gain - t) <= 0.2 * abs(t)

    @property
    def covered(self) -> bool:
        t = self.true_gain
        return (
            t is not None and self.gain_ci is not None and (self.gain_ci[0] <= t <= self.gain_ci[1])
        )


@dataclass(frozen=True)
class Outcome:
    truth: float | None  # the true concurrency crossover in [1, max(LEVELS)], None when none
    estimate: Breakeven | None
    context_truth: float | None = None  # the true context crossover in CONTEXT_RANGE
    draft_truth: list[float] | None = None  # true rates at batch max(LEVELS), k = 0..K drafts

    def drafts(self) -> DraftsOutcome | None:
        """The fewer-drafts prediction beside the truth; None without one."""
        f = self.estimate.fewer_drafts if self.estimate else None
        if f is None or self.draft_truth is None:
            return None
        true = self.draft_truth
        return DraftsOutcome(
            true,
            f.best,
            f.gain,
            f.gain_ci,
            true[f.best] / true[f.drafts] - 1.0 if f.drafts < len(true) else None,
        )

    def axis(self, name: str) -> AxisOutcome:
        a = None if self.estimate is None else getattr(self.estimate, name)
        truth = self.truth if name == "concurrency" else self.context_truth
        return AxisOutcome(truth, a.point if a else None, a.ci if a else None)

    @property
    def point(self) -> float | None:
        return self.axis("concurrency").point

    @property
    def within_20pct(self) -> bool:
        return self.axis("concurrency").within_20pct

    @property
    def covered(self) -> bool:
        return self.axis("concurrency").covered


def with_drafts(sc: tw.Scenario, k: int) -> tw.Scenario:
    """The scenario drafting only its first k tokens per step (a chain cut at depth k, its verify
    k + 1 wide); k = 0 is the scenario's own baseline."""
    if k == 0:
        return sc.variant("baseline")
    acc = sc.acceptance.model_copy(
        update={"depth_probs": sc.acceptance.depth_probs[:k], "verify_width": 0}
    )
    return sc.model_copy(update={"acceptance": acc})


def true_draft_rates(
    sc: tw.Scenario, batch: float = float(max(LEVELS)), context: float = CONTEXT
) -> list[float]:
    """The true per-request rate at `batch` with k = 0..K drafts per step (what
    analysis.breakeven.fewer_drafts predicts from one run at K)."""
    return [
        tw.per_request_rate(with_drafts(sc, k), batch, context)
        for k in range(sc.acceptance.max_drafts + 1)
    ]


def simulated(sc: tw.Scenario, seed: int, repeats: int = 2) -> virtual.VirtualRun:
    """A concurrency sweep (LEVELS, `repeats` rounds each) and a context sweep on the scenario."""

    def simulate(p: int, n: int, seeds: list[int]) -> list[list[tuple[int, float]]]:
        return [
            [(st.commit_len, st.step_s) for st in req]
            for req in tw.simulate_batch_steps(sc, p, n, seeds)
        ]

    plan = virtual.sweep_plan(
        LEVELS,
        prompt_tokens=PROMPT,
        max_tokens=OUTPUT,
        contexts=CONTEXTS,
        context_tokens=CONTEXT_OUTPUT,
        repeats=repeats,
    )
    return virtual.virtual_batched_run(
        simulate,
        plan,
        prefill=lambda p: tw.prefill_time(sc, p),
        seed=seed,
        run_id=f"{sc.name}-{seed}",
    )


def evaluate(name: str, seed: int, *, resamples: int = 200) -> Outcome:
    sc = tw.load_scenario(name)
    base = sc.variant("baseline")
    truth = tw.breakeven_batch(sc, base, CONTEXT, float(max(LEVELS)))
    context_truth = tw.breakeven_context(sc, base, *CONTEXT_RANGE)
    obs = simulated(sc, seed)
    ref = simulated(base, seed + BASELINE_SEED_OFFSET)
    be = breakeven(measure(obs.run, None), measure(ref.run, None), seed=seed, resamples=resamples)
    return Outcome(truth, be, context_truth, true_draft_rates(sc))
