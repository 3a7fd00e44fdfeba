"""Diagnosis accuracy on the virtual-time scenario suite.

Runs every twin scenario (as shipped, then randomised variants: seeds, noise levels, drift and
decay sizes, window sizes, stream intervals, verify costs) through `specscope.analysis.analyze`
against a baseline run and scores it against the exact truth. Prints per scenario the median
and worst attribution error (acceptance and step-time factors vs the realised truth) and how
often the top finding is right; overall accuracy last.
Goal: top finding right >= 95%, median attribution error <= 5%. Bounded: --variants (default 12
per scenario) and a wall-clock budget (--budget-s, default 100 s) both cap the work.

    .venv/bin/python bench/diagnosis_accuracy.py [--variants N] [--seed S] [--budget-s T]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

import numpy as np

from specscope.twin.scenario import load_scenario, scenario_names
from specscope.validation.accuracy import Outcome, evaluate, randomised_cases
from specscope.validation.breakeven import SCENARIOS as BREAKEVEN_SCENARIOS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--variants", type=int, default=12, help="cases per scenario (first = as shipped)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=100.0)
    args = ap.parse_args(argv)
    scenarios = {n: load_scenario(n) for n in scenario_names() if n not in BREAKEVEN_SCENARIOS}
    if "healthy" not in scenarios:
        print(
            "bench: the twin has no healthy.toml scenario; nothing to compare against",
            file=sys.stderr,
        )
        return 2
    cases = randomised_cases(scenarios, per_scenario=max(1, args.variants), seed=args.seed)
    t0 = time.perf_counter()
    results: dict[str, list[Outcome]] = defaultdict(list)
    misses: list[Outcome] = []
    for case in cases:
        if time.perf_counter() - t0 > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s reached: stopping early", file=sys.stderr)
            break
        out = evaluate(case)
        results[case.name].append(out)
        if not out.top_right or out.false_findings:
            misses.append(out)
    elapsed = time.perf_counter() - t0

    print(
        f"{'scenario':22} {'cases':>5} {'top right':>9} {'attr err p50':>12} {'attr err max':>12} "
        f"{'cause err p50':>13} {'false':>5}"
    )
    all_out = [o for v in results.values() for o in v]
    for name, outs in sorted(results.items()):
        errs = [o.attribution_error for o in outs if o.attribution_error is not None]
        right = sum(o.top_right for o in outs)
        false = sum(bool(o.false_findings) for o in outs)
        p50 = f"{np.median(errs):.2%}" if errs else "-"
        mx = f"{max(errs):.2%}" if errs else "-"
        ce = [e for o in outs for e in o.cause_errors.values()]
        cp50 = f"{np.median(ce):.2%}" if ce else "-"
        print(
            f"{name:22} {len(outs):5d} {right / len(outs):9.0%} {p50:>12} {mx:>12} {cp50:>13} {false:5d}"
        )
    for o in misses[:10]:
        got = [f.id for f in o.analysis.findings]
        print(
            f"  miss: {o.case.name} ({o.case.label}, seed {o.case.seed}): expected {sorted(o.expected_top)}, got {got}"
            + (f", false {o.false_findings}" if o.false_findings else "")
        )
    errs = [o.attribution_error for o in all_out if o.attribution_error is not None]
    acc = sum(o.top_right for o in all_out) / len(all_out) if all_out else 0.0
    print(
        f"overall: {len(all_out)} cases in {elapsed:.1f} s; top finding right {acc:.1%} (goal >= 95%); "
        f"median attribution error {np.median(errs):.2%} (goal <= 5%)"
        if errs
        else "overall: no cases"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
