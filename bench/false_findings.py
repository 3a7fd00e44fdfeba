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

With --calibration: the null, effect and calibration cases (effects on both sides of their
minimum, validation/power.calibration_cases) over --seeds seeds from --seed-start; prints the
reliability of the shipped confidence on them and the logistic fit they give
(significance.CONFIDENCE_*: paste it there from a run on seeds 0.., check it on others, 1000..).

    .venv/bin/python bench/false_findings.py [--null-seeds N] [--effect-seeds M] [--full]
    .venv/bin/python bench/false_findings.py --calibration [--seed-start S] [--seeds N]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

import numpy as np
from scipy import optimize, special, stats

from specscope.analysis.fits import significance as sig
from specscope.analysis.result import FINDING_IDS
from specscope.twin.scenario import load_scenario, scenario_names
from specscope.validation import power as pw


def _rate(k: int, n: int) -> str:
    if n == 0:
        return "-"
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    return f"{k / n:6.1%} ({k}/{n}; 95% CI {ci.low:.1%}-{ci.high:.1%})"


def _run(cases: list[pw.PowerCase], budget_s: float) -> tuple[list[pw.PowerOutcome], float]:
    t0 = time.perf_counter()
    outs: list[pw.PowerOutcome] = []
    for case in cases:
        if time.perf_counter() - t0 > budget_s:
            print(f"budget of {budget_s:.0f} s reached: stopping early", file=sys.stderr)
            break
        outs.append(pw.run_case(case))
    return outs, time.perf_counter() - t0


def _print_reliability(outs: list[pw.PowerOutcome], title: str) -> None:
    print(f"\nreliability of confidence ({title})")
    print(f"  {'confidence':14} {'findings':>8} {'mean conf':>9} {'right':>7}")
    for lo, hi, n, mean_c, right in pw.reliability(outs):
        print(f"  [{lo:.2f}, {hi:.2f})   {n:8d} {mean_c:9.3f} {right:7.1%}")


def _logistic(margin: np.ndarray, right: np.ndarray) -> tuple[float, float]:
    """(a, b >= 0) of P(right) = expit(a + b x sqrt(margin)), maximum likelihood (a whisper of
    ridge keeps a curve whose findings are all right finite)."""
    x = np.column_stack([np.ones_like(margin), np.sqrt(margin)])

    def loss(w: np.ndarray) -> float:
        z = x @ w
        fit = right * special.log_expit(z) + (1 - right) * special.log_expit(-z)
        return float(-fit.sum() + 0.01 * w @ w)

    w = optimize.minimize(loss, np.zeros(2), bounds=[(None, None), (0.0, None)], method="L-BFGS-B")
    return round(float(w.x[0]), 2), round(float(w.x[1]), 2)


def _fit(outs: list[pw.PowerOutcome], min_findings: int = 100) -> tuple[dict, tuple]:
    """Per id with >= min_findings reported findings (sampled test), and over all of them
    pooled: the logistic curve of right on the evidence margin (significance.CONFIDENCE_*)."""
    rows: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    for o in outs:
        for fid in o.reported:
            if (t := o.tests.get(fid)) is not None:
                m = sig.evidence_margin(t.effect, t.ci[0], t.min_effect, t.unit)
                rows[fid].append((m, pw.is_right(o, fid)))

    def curve(pairs: list[tuple[float, bool]]) -> tuple[float, float]:
        arr = np.array(pairs, dtype=float)
        return _logistic(arr[:, 0], arr[:, 1])

    curves = {fid: curve(p) for fid, p in sorted(rows.items()) if len(p) >= min_findings}
    return curves, curve([r for p in rows.values() for r in p])


def calibration(args: argparse.Namespace) -> int:
    """The shipped confidence's reliability on these seeds, and the fit they give."""
    scenarios = {n: load_scenario(n) for n in scenario_names()}
    seeds = range(args.seed_start, args.seed_start + args.seeds)
    quick = not args.full
    cases = (
        pw.null_cases(scenarios, seeds=seeds, quick=quick)
        + pw.effect_cases(scenarios, seeds=seeds, quick=quick)
        + pw.calibration_cases(scenarios, seeds=seeds, quick=quick)
    )
    outs, elapsed = _run(cases, args.budget_s)
    print(
        f"{len(outs)} virtual diagnoses (null, effect and calibration cases, seeds "
        f"{seeds.start}..{seeds.stop - 1}) in {elapsed:.1f} s"
    )
    _print_reliability(outs, "the shipped mapping, these seeds")
    confs = sorted(c for o in outs for fid, c in o.reported.items() if fid in o.tests)
    if confs:
        qs = np.quantile(confs, [0.1, 0.25, 0.5, 0.75, 0.9])
        print("  spread: deciles 10/25/50/75/90% at " + ", ".join(f"{v:.3f}" for v in qs))
    curves, pooled = _fit(outs)
    print("\nlogistic fit on these seeds (significance.CONFIDENCE_*):")
    print(f"  CONFIDENCE_CURVES = {curves}\n  CONFIDENCE_POOLED = {pooled}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--null-seeds", type=int, default=40, help="runs per null server")
    ap.add_argument("--effect-seeds", type=int, default=20, help="runs per effect scenario")
    ap.add_argument("--full", action="store_true", help="the full plan instead of --quick")
    ap.add_argument("--budget-s", type=float, default=600.0)
    ap.add_argument("--calibration", action="store_true", help="calibrate confidence (see above)")
    ap.add_argument("--seed-start", type=int, default=1000, help="--calibration: first seed")
    ap.add_argument("--seeds", type=int, default=50, help="--calibration: seeds per case")
    args = ap.parse_args(argv)
    if args.calibration:
        return calibration(args)
    if args.null_seeds < 1 or args.effect_seeds < 0:
        print("bench: --null-seeds must be >= 1 and --effect-seeds >= 0", file=sys.stderr)
        return 2
    scenarios = {n: load_scenario(n) for n in scenario_names()}
    quick = not args.full
    cases = pw.null_cases(scenarios, seeds=range(args.null_seeds), quick=quick) + pw.effect_cases(
        scenarios, seeds=range(args.effect_seeds), quick=quick
    )
    outs, elapsed = _run(cases, args.budget_s)
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

    _print_reliability(outs, "reported findings with a sampled test")
    print(
        f"\noverall: worst false-finding rate {worst:.1%} (goal <= 5%); lowest stated detection "
        f"{lowest:.0%} (goal >= 90%); coverage {sum(allhits) / max(len(allhits), 1):.1%} "
        "(goal >= 90%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
