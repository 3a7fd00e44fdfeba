"""Breakeven accuracy on the twin: the concurrency and the context at which speculation stops
paying, found by analysis.breakeven from virtual-time sweeps of a speculative scenario and of its
plain baseline, against the scenario's exact crossovers (validation.breakeven).

Per scenario and axis (concurrency over batch 1..16, context over the batch-1 context sweep):
runs, the true crossover, the median estimate, the share of runs within 20% of the truth, the
share whose 95% interval holds it; where the truth has no crossover in range, the share of runs
that say so. Then the fewer-drafts prediction at batch 16 (analysis.breakeven.fewer_drafts)
against the twin's rates with k drafts per step: the true best k and its gain, the median
predicted gain, the shares within 20% of the true gain and holding it in the interval, and the
share of runs whose chosen k is within 5% of the best rate. Exit 1 when a share is below 90%
(the fewer-drafts interval coverage is printed, not required: see docs/breakeven.md).

    PYTHONPATH=src python bench/breakeven.py [--seeds 20] [--scenario NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from specscope.validation.breakeven import SCENARIOS, Outcome, evaluate

TARGET = 0.9
AXES = ("concurrency", "context")


def row(name: str, axis: str, outs: list[Outcome], per_run: float) -> tuple[str, bool]:
    """One table row and whether it meets the target."""
    res = [o.axis(axis) for o in outs]
    truth = res[0].truth
    head = f"{name:<20} {axis:<11}"
    if truth is None:
        said = float(
            np.mean(
                [r.says_none and o.estimate is not None for r, o in zip(res, outs, strict=True)]
            )
        )
        return (
            f"{head} {'none':>7} {len(res):>4} {'-':>8} {'-':>9} {'-':>7} {said:>8.0%} "
            f"{per_run:>6.2f}",
            said >= TARGET,
        )
    pts = [r.point for r in res if r.point is not None]
    within = float(np.mean([r.within_20pct for r in res]))
    covered = float(np.mean([r.covered for r in res]))
    med = float(np.median(pts)) if pts else float("nan")
    return (
        f"{head} {truth:>7.2f} {len(res):>4} {med:>8.2f} {within:>9.0%} {covered:>7.0%} "
        f"{'-':>8} {per_run:>6.2f}",
        within >= TARGET and covered >= TARGET,
    )


def drafts_row(name: str, outs: list[Outcome]) -> tuple[str, bool]:
    """The fewer-drafts prediction at batch 16: the true best draft count and its gain over the
    run's own; the median predicted gain; the share of runs within 20% of the true gain (at
    the count they chose), whose interval holds it, and whose choice is within 5% of the best."""
    res = [d for o in outs if (d := o.drafts()) is not None]
    if not res:
        return f"{name:<20} {'drafts':<11} {'-':>7} {0:>4} (no prediction)", False
    t = res[0]
    truth = f"{t.true_best}:{t.true_rates[t.true_best] / t.true_rates[-1] - 1:+.0%}"
    med = float(np.median([r.gain for r in res]))
    within = float(np.mean([r.within_20pct for r in res]))
    covered = float(np.mean([r.covered for r in res]))
    right = float(np.mean([r.right_choice for r in res]))
    ok = len(res) == len(outs) and within >= TARGET and right >= TARGET
    return (
        f"{name:<20} {'drafts':<11} {truth:>7} {len(res):>4} {med:>+8.0%} {within:>9.0%} "
        f"{covered:>7.0%} {'-':>8} {'':>6} right K' {right:.0%}",
        ok,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS)
    args = ap.parse_args()
    print(
        f"{'scenario':<20} {'axis':<11} {'truth':>7} {'runs':>4} {'median':>8} {'within20%':>9} "
        f"{'covered':>7} {'no-cross':>8} {'s/run':>6}"
    )
    failed = False
    for name in args.scenario or SCENARIOS:
        t0 = time.perf_counter()
        outs = [evaluate(name, s) for s in range(args.seeds)]
        per_run = (time.perf_counter() - t0) / len(outs)
        for axis in AXES:
            line, ok = row(name, axis, outs, per_run)
            print(line, flush=True)
            failed |= not ok
        line, ok = drafts_row(name, outs)
        print(line, flush=True)
        failed |= not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
