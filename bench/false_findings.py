"""False findings, power, interval coverage and calibration of the findings' tests.

Repeated virtual-time diagnoses (the plan `specscope diagnose --quick` runs, calibration request
included) of twin scenarios with realistic noise (content-dependent acceptance per request and
along the generation, correlated step noise, stalls, spikes: validation/power.REALISTIC):
- null scenarios (no effect but context scaling; every third run with a baseline run of the same
  server) -> the false-finding rate per id (goal <= 5%);
- scenarios with true effects of stated sizes (validation/power.effect_cases) -> the detection
  rate of each true id (goal >= 90%);
- the 95% intervals of the tests' effects and of the attribution factors against the twin's
  truth -> coverage (goal >= 90%);
- a reliability table: reported findings binned by confidence, the share of them that is right.
No sleeping: minutes for hundreds of diagnoses. Bounded by --null-seeds, --effect-seeds and a
wall-clock budget (--budget-s).

    .venv/bin/python bench/false_findings.py [--null-seeds N] [--effect-seeds M] [--full]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

from scipy import stats

from specscope.analysis.result import FINDING_IDS
from specscope.twin.scenario import load_scenario, scenario_names
from specscope.validation import power as pw


def _rate(k: int, n: int) -> str:
    if n == 0:
        return "-"
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    return f"{k / n:6.1%} ({k}/{n}; 95% CI {ci.low:.1%}-{ci.high:.1%})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--null-seeds", type=int, default=40, help="runs per null server")
    ap.add_argument("--effect-seeds", type=int, default=20, help="runs per effect scenario")
    ap.add_argument("--full", action="store_true", help="the full plan instead of --quick")
    ap.add_argument("--budget-s", type=float, default=600.0)
    args = ap.parse_args(argv)
    if args.null_seeds < 1 or args.effect_seeds < 0:
        print("bench: --null-seeds must be >= 1 and --effect-seeds >= 0", file=sys.stderr)
        return 2
    scenarios = {n: load_scenario(n) for n in scenario_names()}
    quick = not args.full
    cases = pw.null_cases(scenarios, seeds=range(args.null_seeds), quick=quick) + pw.effect_cases(
        scenarios, seeds=range(args.effect_seeds), quick=quick
    )
    t0 = time.perf_counter()
    outs: list[pw.PowerOutcome] = []
    for case in cases:
        if time.perf_counter() - t0 > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s reached: stopping early", file=sys.stderr)
            break
        outs.append(pw.run_case(case))
    elapsed = time.perf_counter() - t0
    nulls = [o for o in outs if o.case.name.startswith("null:")]
    effects = [o for o in outs if o.case.name.startswith("effect:")]
    plan = "quick" if quick else "full"
    print(f"{len(outs)} virtual diagnoses ({plan} plan, realistic noise) in {elapsed:.1f} s\n")

    print("false findings on null scenarios (no effect but context scaling), goal <= 5% per id")
    worst = 0.0
    for fid in FINDING_IDS:
        judged = [o for o in nulls if not pw.is_right(o, fid)]
        k = sum(fid in o.reported for o in judged)
        worst = max(worst, k / len(judged) if judged else 0.0)
        print(f"  {fid:22} {_rate(k, len(judged))}")
    cs = [o for o in nulls if pw.is_right(o, "context_scaling")]
    print(
        f"  (context_scaling, true there: found {_rate(sum('context_scaling' in o.reported for o in cs), len(cs))})"
    )

    print("\ndetection of true effects, goal >= 90% for the stated ones (*)")
    by_case: dict[str, list[pw.PowerOutcome]] = defaultdict(list)
    for o in effects:
        by_case[o.case.name].append(o)
    lowest = 1.0
    for name, group in sorted(by_case.items()):
        true_ids = sorted({f for o in group for f, v in o.truth.present.items() if v})
        for fid in true_ids:
            have = [o for o in group if o.truth.present.get(fid)]
            k = sum(fid in o.reported for o in have)
            size = have[0].truth.effect.get(fid)
            stated = fid in group[0].case.stated
            if stated:
                lowest = min(lowest, k / len(have))
            sz = f" (true size {size:+.0%})" if size is not None else ""
            mark = "*" if stated else " "
            print(f" {mark}{name:26} {fid:18}{sz:22} {_rate(k, len(have))}")
        wrong = defaultdict(int)
        for o in group:
            for fid in o.reported:
                if not pw.is_right(o, fid):
                    wrong[fid] += 1
        if wrong:
            print(
                f"  {name:26} reported although not true (or below its minimum): "
                + ", ".join(f"{k} {v}/{len(group)}" for k, v in sorted(wrong.items()))
            )

    print("\ncoverage of the twin's truth by the 95% intervals, goal >= 90%")
    cov: dict[str, list[bool]] = defaultdict(list)
    for o in outs:
        for name, (lo, hi, true) in o.intervals.items():
            kind = "null" if o.case.name.startswith("null:") else "effect"
            cov[f"{name} ({kind})"].append(lo <= true <= hi)
    for name, hits in sorted(cov.items()):
        print(f"  {name:46} {_rate(sum(hits), len(hits))}")
    allhits = [h for v in cov.values() for h in v]

    print("\nreliability of confidence (reported findings with a sampled test)")
    print(f"  {'confidence':14} {'findings':>8} {'mean conf':>9} {'right':>7}")
    for lo, hi, n, mean_c, right in pw.reliability(outs):
        print(f"  [{lo:.2f}, {hi:.2f})   {n:8d} {mean_c:9.3f} {right:7.1%}")
    print(
        f"\noverall: worst false-finding rate {worst:.1%} (goal <= 5%); lowest stated detection "
        f"{lowest:.0%} (goal >= 90%); coverage {sum(allhits) / max(len(allhits), 1):.1%} "
        "(goal >= 90%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
