"""Breakeven against the twin's truth: a speculative scenario and its plain baseline simulated as
continuous batches (virtual time), measured as a client records them, analysed by
analysis.breakeven, and set beside the scenario's exact crossover (twin.model.breakeven_batch).
Used by the breakeven tests and bench/breakeven.py; imports the twin, so it lives outside
analysis/."""

from __future__ import annotations

from dataclasses import dataclass

from specscope.analysis import virtual
from specscope.analysis.breakeven import Breakeven, breakeven
from specscope.analysis.measure import measure
from specscope.twin import model as tw

# The shipped scenarios made for breakeven: each is judged against its own [baseline] across a
# concurrency sweep, not by the concurrency-1 accuracy suite (validation.accuracy), which
# leaves them out.
SCENARIOS = ("batch-verify-cost", "shared-drafter", "expensive-tree", "batch-headroom")
LEVELS = (1, 2, 4, 8, 16)
PROMPT, OUTPUT = 512, 128
CONTEXT = PROMPT + OUTPUT // 2  # the concurrency sweep's median context
BASELINE_SEED_OFFSET = 7919  # the baseline run draws other numbers than the observed one


@dataclass(frozen=True)
class Outcome:
    truth: float | None  # the true crossover in [1, max(LEVELS)], None when there is none
    estimate: Breakeven | None

    @property
    def point(self) -> float | None:
        return self.estimate.concurrency.point if self.estimate else None

    @property
    def within_20pct(self) -> bool:
        p = self.point
        return self.truth is not None and p is not None and abs(p - self.truth) <= 0.2 * self.truth

    @property
    def covered(self) -> bool:
        """The 95% interval holds the truth (an open end counts as holding it on that side)."""
        ci = self.estimate.concurrency.ci if self.estimate else None
        if self.truth is None or ci is None:
            return False
        return (ci[0] is None or ci[0] <= self.truth) and (ci[1] is None or self.truth <= ci[1])


def simulated(sc: tw.Scenario, seed: int, repeats: int = 2) -> virtual.VirtualRun:
    """A concurrency sweep (LEVELS, `repeats` rounds each) and a context sweep on the scenario."""

    def simulate(p: int, n: int, seeds: list[int]) -> list[list[tuple[int, float]]]:
        return [[(st.commit_len, st.step_s) for st in req]
                for req in tw.simulate_batch_steps(sc, p, n, seeds)]

    plan = virtual.sweep_plan(LEVELS, prompt_tokens=PROMPT, max_tokens=OUTPUT, repeats=repeats)
    return virtual.virtual_batched_run(simulate, plan, prefill=lambda p: tw.prefill_time(sc, p),
                                       seed=seed, run_id=f"{sc.name}-{seed}")


def evaluate(name: str, seed: int, *, resamples: int = 200) -> Outcome:
    sc = tw.load_scenario(name)
    base = sc.variant("baseline")
    truth = tw.breakeven_batch(sc, base, CONTEXT, float(max(LEVELS)))
    obs = simulated(sc, seed)
    ref = simulated(base, seed + BASELINE_SEED_OFFSET)
    be = breakeven(measure(obs.run, None), measure(ref.run, None), seed=seed, resamples=resamples)
    return Outcome(truth, be)
