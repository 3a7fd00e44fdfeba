"""Breakeven on a real peer: vLLM's CPU build with n-gram speculation against the same server
without speculation, swept over concurrency (and context, through diagnose's context sweep).

Serves one vLLM at a time (`python -m specscope.peers.vllm`, ~5 GB each, never two at once):
first `--spec none`, measured with `specscope diagnose --concurrency ...`, then `--spec ngram`,
measured the same way with the first run as `--baseline`. Then `specscope compare` (the CLI's own
breakeven) and a table per concurrency: per-request decode tps of both runs, their ratio, and the
aggregate decode rate (C x per-request), each with a 95% percentile-bootstrap interval over
requests; then the breakeven concurrency and context with their intervals, the advantage at each
end of the ranges, the loss factors and the recommendation.

    PYTHONPATH=src python bench/breakeven_peer.py [--levels 1,2,4] [--repeat 3] [--out DIR]
    PYTHONPATH=src python bench/breakeven_peer.py --from-runs DIR/none DIR/ngram   # re-analyse

Needs `make peer-vllm` (.cache/peer-vllm). Takes ~8 minutes on 2 idle cores with the defaults.
Exit 1 when a server or a measurement failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from specscope.analysis.headline.measure import concurrency_of
from specscope.analysis.headline.uncertainty import CI_LEVEL
from specscope.trace import tags
from specscope.trace.rundir import load_run

RESAMPLES = 2000


def serve_and_diagnose(
    spec: str, out: Path, args: argparse.Namespace, baseline: Path | None
) -> Path:
    """One vLLM server around one `specscope diagnose`: the run directory it wrote."""
    run_dir = out / spec
    cmd = [
        sys.executable,
        "-m",
        "specscope.peers.vllm",
        "--spec",
        spec,
        "--enforce-eager",
        "--cpu-bind",
        args.cpu_bind,
        "--log",
        str(out / f"{spec}.log"),
        "--timeout",
        str(args.timeout),
        "--",
        sys.executable,
        "-m",
        "specscope.cli",
        "diagnose",
        "{url}",
        "--quick",
        "--prompt-tokens",
        str(args.prompt_tokens),
        "--max-tokens",
        str(args.max_tokens),
        "--concurrency",
        args.levels,
        "--repeat",
        str(args.repeat),
        "--workload",
        args.workload,
        "--logs",
        "{log}",
        "--out",
        str(run_dir),
        "--json",
    ]
    if baseline is not None:
        cmd += ["--baseline", str(baseline)]
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    with open(out / f"{spec}.json", "w") as stdout, open(out / f"{spec}.err", "w") as stderr:
        rc = subprocess.run(cmd, stdout=stdout, stderr=stderr, check=False).returncode
    # the machine's load beside the figures: on a shared box both runs should see the same
    print(
        f"# vllm --spec {spec}: diagnose exit {rc} after {time.perf_counter() - t0:.0f} s, "
        f"1-min load average {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end on "
        f"{os.cpu_count()} cores (stderr: {out / f'{spec}.err'})",
        flush=True,
    )
    if rc not in (0, 1) or not (run_dir / "requests.jsonl").exists():
        raise SystemExit(f"error: the {spec} run failed (exit {rc}); see {out / f'{spec}.err'}")
    return run_dir


def per_request_rates(run_dir: Path) -> dict[int, np.ndarray]:
    """Per-request decode tps (the probe's decode window) of each concurrency-sweep level."""
    out: dict[int, list[float]] = {}
    for r in load_run(run_dir).requests:
        if (
            r.ok
            and tags.split(r.spec.tag)[0] == tags.CONCURRENCY_SWEEP
            and (w := r.decode_window())
            and w[1] > 0
        ):
            out.setdefault(concurrency_of(r), []).append(w[0] / w[1])
    return {c: np.asarray(v) for c, v in sorted(out.items())}


def interval(samples: tuple[np.ndarray, ...], statistic: Any) -> tuple[float, float] | None:
    """Percentile-bootstrap interval over requests (independent samples resampled apart)."""
    if any(s.size < 2 for s in samples):
        return None
    res = stats.bootstrap(
        samples,
        statistic,
        n_resamples=RESAMPLES,
        confidence_level=CI_LEVEL,
        method="percentile",
        vectorized=False,
        rng=np.random.default_rng(0),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def fmt(v: float | None, ci: tuple[float, float] | None, digits: int = 1) -> str:
    if v is None:
        return "-"
    body = f"{v:.{digits}f}"
    return body + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else " [n<2]")


def table(base: dict[int, np.ndarray], obs: dict[int, np.ndarray]) -> list[str]:
    lines = [
        f"{'C':>3} {'n':>5}  {'plain tps/request':<22} {'ngram tps/request':<22} "
        f"{'ngram/plain':<20} {'plain aggregate':<22} {'ngram aggregate':<22}"
    ]
    for c in sorted(set(base) | set(obs)):
        b, o = base.get(c), obs.get(c)
        n = f"{0 if b is None else b.size}/{0 if o is None else o.size}"
        cells = []
        for x in (b, o):
            cells.append(
                fmt(None, None) if x is None else fmt(float(x.mean()), interval((x,), np.mean))
            )
        if b is not None and o is not None:
            ratio_ci = interval((o, b), lambda x, y: np.mean(x) / np.mean(y))
            cells.append(fmt(float(o.mean() / b.mean()), ratio_ci, 2))
        else:
            cells.append("-")
        for x in (b, o):
            if x is None:
                cells.append("-")
                continue
            ci = interval((x,), np.mean)
            cells.append(fmt(c * float(x.mean()), None if ci is None else (c * ci[0], c * ci[1])))
        lines.append(
            f"{c:>3} {n:>5}  {cells[0]:<22} {cells[1]:<22} {cells[2]:<20} "
            f"{cells[3]:<22} {cells[4]:<22}"
        )
    return lines


def compare_breakeven(base: Path, obs: Path) -> dict[str, Any]:
    """The CLI's breakeven: `specscope compare BASE OBS --json`."""
    cp = subprocess.run(
        [sys.executable, "-m", "specscope.cli", "compare", str(base), str(obs), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if cp.returncode not in (0, 1):
        raise SystemExit(f"error: specscope compare failed ({cp.returncode}): {cp.stderr.strip()}")
    return json.loads(cp.stdout).get("breakeven") or {}


def report(base: Path, obs: Path) -> None:
    print(
        f"# per-request decode tps (tokens after the first / seconds), {CI_LEVEL:.0%} bootstrap "
        "intervals over requests; aggregate = C x per-request"
    )
    for line in table(per_request_rates(base), per_request_rates(obs)):
        print(line)
    be = compare_breakeven(base, obs)
    if not be:
        print("breakeven: none (compare gave no breakeven object)")
        return

    def ci(v: list[float | None] | None) -> str:
        if not v:
            return "[no interval]"
        return "[" + ", ".join("open" if x is None else f"{x:.2f}" for x in v) + "]"

    adv, adv_ci = be.get("advantage") or {}, be.get("advantage_ci") or {}
    for axis, unit in (("concurrency", ""), ("context", " tokens")):
        lo, hi = be.get(f"{axis}_range") or [None, None]
        a_lo, a_hi = adv.get(f"at_{axis}_low"), adv.get(f"at_{axis}_high")
        head = f"breakeven {axis} over [{lo}, {hi}]{unit}:"
        if be.get(axis) is not None:
            print(f"{head} {be[axis]:.1f}{unit} {ci(be.get(f'{axis}_ci'))}")
        else:
            print(f"{head} none: {be.get(f'{axis}_reason')}")
        if a_lo is not None and a_hi is not None:
            print(
                f"  fitted ngram/plain per-request rate: {a_lo:.2f}x "
                f"{ci(adv_ci.get(f'at_{axis}_low'))} at {lo}, {a_hi:.2f}x "
                f"{ci(adv_ci.get(f'at_{axis}_high'))} at {hi}"
            )
    for f in be.get("factors") or []:
        print(f"  factor {f['name']}: x{f['factor']:.2f} ({f['description']})")
    fd = be.get("fewer_drafts")
    if fd:
        g = fd.get("predicted_gain_ci")
        print(
            f"fewer drafts at batch {fd['batch']:.0f}: best {fd['best_drafts']} of "
            f"{fd['drafts']}, predicted {fd['predicted_gain']:+.0%}"
            + (f" [{g[0]:+.0%}, {g[1]:+.0%}]" if g else "")
            + " per request"
        )
    print(f"recommendation: {be.get('recommendation')}")
    if be.get("predicted_gain") is not None:
        print(f"predicted gain: {be['predicted_gain']:+.0%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", default="1,2,4", help="concurrency levels")
    ap.add_argument("--repeat", type=int, default=3, help="diagnose --repeat (rounds per level)")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--workload", default="code-edit", help="diagnose --workload")
    ap.add_argument(
        "--cpu-bind",
        default="auto",
        help="peers.vllm --cpu-bind (auto: one compute thread, steadier on a busy box)",
    )
    ap.add_argument("--timeout", type=float, default=900.0, help="per run, s")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here")
    ap.add_argument(
        "--ngram-first",
        action="store_true",
        help="serve n-gram first (no --baseline), then plain: repeating the bench in "
        "both orders tells a drift in the machine's load from the method",
    )
    ap.add_argument(
        "--from-runs",
        nargs=2,
        type=Path,
        metavar=("PLAIN", "NGRAM"),
        help="re-analyse two run directories instead of serving",
    )
    args = ap.parse_args()
    if args.from_runs:
        base, obs = args.from_runs
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="breakeven-peer-"))
        out.mkdir(parents=True, exist_ok=True)
        if args.ngram_first:
            obs = serve_and_diagnose("ngram", out, args, None)
            base = serve_and_diagnose("none", out, args, None)
        else:
            base = serve_and_diagnose("none", out, args, None)
            obs = serve_and_diagnose("ngram", out, args, base)
    print(f"# runs: plain {base}, ngram {obs}")
    report(base, obs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
