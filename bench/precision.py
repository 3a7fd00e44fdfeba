"""How many full generations decode tps needs, and whether its 95% interval tells the truth.

Virtual-time twin runs (no sleeping) of the user's full generation with realistic noise
(validation/power.REALISTIC: content moves each request's acceptance, passages wander, steps
jitter, some requests stall), against the true rate of the same server (token-weighted over
--truth-requests requests of another seed):
1. by request count n: the median and 90th-percentile relative half-width of the headline's
   decode-tps interval and how often it covers the true rate (block intervals below 8
   requests, request intervals from 8) and the spread between requests (cv);
2. the --precision loop as `diagnose` runs it (analysis.precision.decide after each round,
   virtual seconds against the budget) for each target/budget pair: requests used, how often it
   stopped on precision or budget, the precision reached and the coverage of the truth at stop.
The defaults of experiments.diagnosis_plan (DEFAULT_PRECISION, DEFAULT_BUDGET_S) are chosen from
this table.

    .venv/bin/python bench/precision.py [--runs N] [--prompt P] [--tokens G] [--scenario NAME]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from specscope.analysis.headline import precision as pr
from specscope.experiments import diagnosis_plan
from specscope.trace import tags
from specscope.trace.model import RequestTrace
from specscope.twin import scenario as tw
from specscope.validation import power as pw
from specscope.validation import virtual


def _requests(sc: tw.Scenario, prompt: int, tokens: int, n: int, seed: int) -> list[RequestTrace]:
    plan = [virtual.PlanItem(tags.FULL_GENERATION, prompt, tokens, n)]
    return virtual.scenario_run(sc, plan, seed=seed, run_id=f"precision-{seed}").run.requests


def _truth(sc: tw.Scenario, prompt: int, tokens: int, n: int) -> float:
    tok = sec = 0.0
    for r in _requests(sc, prompt, tokens, n, 10**6):
        w = r.decode_window()
        if w:
            tok, sec = tok + w[0], sec + w[1]
    return tok / sec


def _wall_s(t: RequestTrace) -> float:
    return ((t.t_end_ns or t.t_send_ns) - t.t_send_ns) / 1e9


def _loop(
    pool: list[RequestTrace], target: float, budget_s: float, tokens: int
) -> tuple[pr.Reading, str, int]:
    """The diagnose loop over a pool of pre-simulated requests, in order, on virtual time."""
    used, spent, committed = 1, 0.0, 0
    budget = pr.Budget(budget_s, None, diagnosis_plan.MAX_PRECISION_REQUESTS)
    while True:
        traces = pool[:used]
        r = pr.reading(traces)
        spr = float(np.mean([_wall_s(t) for t in traces]))
        d = pr.decide(
            r,
            target,
            budget,
            committed=committed,
            spent_s=spent,
            seconds_per_request=spr,
            tokens_per_request=tokens,
        )
        committed = max(committed, d.needed or 0)
        if d.stopped_by is not None:
            return r, d.stopped_by, used
        spent += sum(_wall_s(t) for t in pool[used : used + d.more])
        used += d.more


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30, help="repeated runs per row")
    ap.add_argument("--prompt", type=int, default=2700)
    ap.add_argument("--tokens", type=int, default=1500)
    ap.add_argument("--scenario", default="healthy")
    ap.add_argument(
        "--time-scale", type=float, default=1.0, help="the twin's time scale (slower servers: > 1)"
    )
    ap.add_argument("--truth-requests", type=int, default=200)
    ap.add_argument("--counts", default="1,2,4,6,8,12,16")
    args = ap.parse_args(argv)
    if args.runs < 2 or args.tokens < 16 or args.prompt < 1:
        print("bench: --runs must be >= 2, --tokens >= 16, --prompt >= 1", file=sys.stderr)
        return 2
    sc = pw.realistic(tw.load_scenario(args.scenario)).model_copy(
        update={"time_scale": args.time_scale}
    )
    t0 = time.perf_counter()
    truth = _truth(sc, args.prompt, args.tokens, args.truth_requests)
    print(
        f"scenario {args.scenario} with realistic noise, {args.prompt} -> {args.tokens} tokens; "
        f"true decode rate {truth:.1f} tok/s ({args.truth_requests} requests)"
    )
    print("\n1. the headline interval by number of full generations")
    print(
        f"{'n':>4} {'interval':>9} {'median +-':>10} {'p90 +-':>8} {'covers truth':>14} "
        f"{'cv between requests':>20}"
    )
    for n in [int(x) for x in args.counts.split(",")]:
        hws, cover, cvs = [], 0, []
        for s in range(args.runs):
            r = pr.reading(_requests(sc, args.prompt, args.tokens, n, s))
            hws.append(r.relative_half_width)
            cover += r.ci[0] <= truth <= r.ci[1]
            if r.request_cv is not None:
                cvs.append(r.request_cv)
        kind = "requests" if r.over_requests else "blocks"
        cv = f"{np.median(cvs):.3f}" if cvs else "-"
        print(
            f"{n:>4} {kind:>9} {np.median(hws):>10.1%} {np.quantile(hws, 0.9):>8.1%} "
            f"{cover:>5}/{args.runs} {cover / args.runs:>6.0%} {cv:>20}"
        )
    print("\n2. the --precision loop (diagnose's decisions, virtual seconds against the budget)")
    print(
        f"{'target':>7} {'budget s':>9} {'requests med (max)':>19} {'precision':>10} "
        f"{'budget':>7} {'reached med':>12} {'covers truth':>13} {'time med s':>11}"
    )
    pool_n = diagnosis_plan.MAX_PRECISION_REQUESTS
    pools = [_requests(sc, args.prompt, args.tokens, pool_n, 1000 + s) for s in range(args.runs)]
    rows = [
        (diagnosis_plan.DEFAULT_PRECISION[q], diagnosis_plan.DEFAULT_BUDGET_S[q])
        for q in (True, False)
    ] + [(0.05, 600.0), (0.03, 1200.0)]
    for target, budget in rows:
        used, stop, reached, cover, secs = [], [], [], 0, []
        for pool in pools:
            r, why, n = _loop(pool, target, budget, args.tokens)
            used.append(n)
            stop.append(why)
            reached.append(r.relative_half_width)
            cover += r.ci[0] <= truth <= r.ci[1]
            secs.append(sum(_wall_s(t) for t in pool[:n]))
        k = len(pools)
        print(
            f"{target:>7.0%} {budget:>9.0f} {int(np.median(used)):>12} ({max(used):>3})  "
            f"{stop.count(pr.PRECISION) / k:>10.0%} {stop.count(pr.BUDGET) / k:>7.0%} "
            f"{np.median(reached):>12.1%} {cover / k:>13.0%} {np.median(secs):>11.0f}"
        )
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
