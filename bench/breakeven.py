"""Breakeven accuracy on the twin: the concurrency at which speculation stops paying, found by
analysis.breakeven from a virtual-time sweep of a speculative scenario and of its plain baseline,
against the scenario's exact crossover (twin.model.breakeven_batch).

For each scenario with a [baseline] and each seed: both runs are simulated as continuous batches
(a concurrency sweep 1,2,4,8,16 and a context sweep), measured as a client would record them,
and the breakeven concurrency with its 95% interval is compared with the truth. Printed per
scenario: runs, median estimate, share within 20% of the truth, share of intervals covering it;
for the scenario without a crossover in range, the share of runs that say so.

    PYTHONPATH=src python bench/breakeven.py [--seeds 20] [--scenario NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from specscope.analysis import virtual
from specscope.analysis.breakeven import Breakeven, breakeven
from specscope.analysis.measure import measure
from specscope.twin import model as tw

SCENARIOS = ("batch-verify-cost", "shared-drafter", "expensive-tree", "batch-headroom")
LEVELS = (1, 2, 4, 8, 16)
PROMPT, OUTPUT = 512, 128
CONTEXT = PROMPT + OUTPUT // 2  # the sweep's median context


@dataclass
class Outcome:
    truth: float | None
    estimate: Breakeven | None


def simulated(sc: tw.Scenario, seed: int, repeats: int = 2) -> virtual.VirtualRun:
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
    ref = simulated(base, seed + 7919)
    be = breakeven(measure(obs.run, None), measure(ref.run, None), seed=seed, resamples=resamples)
    return Outcome(truth, be)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS)
    args = ap.parse_args()
    names = args.scenario or list(SCENARIOS)
    print(f"{'scenario':<20} {'truth':>6} {'runs':>4} {'median':>7} {'within20%':>9} "
          f"{'covered':>7} {'no-cross':>8}  {'s/run':>5}")
    failed = False
    for name in names:
        t0 = time.perf_counter()
        outs = [evaluate(name, s) for s in range(args.seeds)]
        dt = (time.perf_counter() - t0) / len(outs)
        truth = outs[0].truth
        pts = [o.estimate.concurrency.point if o.estimate else None for o in outs]
        if truth is None:
            none = np.mean([p is None for p in pts])
            print(f"{name:<20} {'none':>6} {len(outs):>4} {'-':>7} {'-':>9} {'-':>7} "
                  f"{none:>8.0%}  {dt:>5.2f}")
            failed |= none < 0.9
            continue
        est = [p for p in pts if p is not None]
        within = np.mean([p is not None and abs(p - truth) <= 0.2 * truth for p in pts])
        cis = [o.estimate.concurrency.ci if o.estimate else None for o in outs]
        covered = np.mean([ci is not None and (ci[0] is None or ci[0] <= truth)
                           and (ci[1] is None or truth <= ci[1]) for ci in cis])
        med = float(np.median(est)) if est else float("nan")
        print(f"{name:<20} {truth:>6.2f} {len(outs):>4} {med:>7.2f} {within:>9.0%} "
              f"{covered:>7.0%} {'-':>8}  {dt:>5.2f}")
        failed |= within < 0.9 or covered < 0.9
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
