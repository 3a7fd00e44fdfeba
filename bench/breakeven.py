"""Breakeven accuracy on the twin: the concurrency at which speculation stops paying, found by
analysis.breakeven from virtual-time sweeps of a speculative scenario and of its plain baseline,
against the scenario's exact crossover (validation.breakeven).

Per scenario: runs, the true crossover, the median estimate, the share of runs within 20% of the
truth, the share whose 95% interval holds it; for the scenario without a crossover in range, the
share of runs that say so. Exit 1 when a share is below 90%.

    PYTHONPATH=src python bench/breakeven.py [--seeds 20] [--scenario NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from specscope.validation.breakeven import SCENARIOS, evaluate

TARGET = 0.9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS)
    args = ap.parse_args()
    print(f"{'scenario':<20} {'truth':>6} {'runs':>4} {'median':>7} {'within20%':>9} "
          f"{'covered':>7} {'no-cross':>8} {'s/run':>6}")
    failed = False
    for name in args.scenario or SCENARIOS:
        t0 = time.perf_counter()
        outs = [evaluate(name, s) for s in range(args.seeds)]
        per_run = (time.perf_counter() - t0) / len(outs)
        truth = outs[0].truth
        if truth is None:
            said = float(np.mean([o.point is None and o.estimate is not None for o in outs]))
            print(f"{name:<20} {'none':>6} {len(outs):>4} {'-':>7} {'-':>9} {'-':>7} "
                  f"{said:>8.0%} {per_run:>6.2f}")
            failed |= said < TARGET
            continue
        pts = [o.point for o in outs if o.point is not None]
        within = float(np.mean([o.within_20pct for o in outs]))
        covered = float(np.mean([o.covered for o in outs]))
        med = float(np.median(pts)) if pts else float("nan")
        print(f"{name:<20} {truth:>6.2f} {len(outs):>4} {med:>7.2f} {within:>9.0%} "
              f"{covered:>7.0%} {'-':>8} {per_run:>6.2f}")
        failed |= within < TARGET or covered < TARGET
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
