"""Re-analyse a fault matrix's recorded runs with this checkout's analysis: the confusion table
again, without a server or a GPU.

The H200 matrix (docs/faults.md "On the H200") kept every run's diagnose directory
(bench/results/fault_matrix_h200_runs.tar.xz: requests, server log, telemetry). A change to the
diagnosis is checked against those real runs here, row by row, with the same verdict
(`validation.faults.is_right`) and the device's null rows as the matrix itself:

    .venv/bin/python bench/fault_matrix_reanalyze.py bench/results/fault_matrix_h200_runs.tar.xz \\
        --device cuda [--out FILE.json] [--client-lag]

`--client-lag` also prints each run's client timing health from the same analysis: the loop
lag's median (the wake-up every read pays), mean and mean excess over the median against the
median step (the figures of ARCHITECTURE §6 and docs/faults.md's second matrix).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from specscope.store.analyses import analyze_run
from specscope.trace import load_run
from specscope.trace.rundir import RunDirError
from specscope.validation import faults as fm

RUN_NAME = re.compile(r"^(?P<row>[a-z-]+)-(?P<repeat>\d+)$")


def _lag_line(row: str, repeat: int, client: dict | None) -> str:
    """One run's client lag against its median step, in ms (the guard's inputs)."""
    if not client or client.get("lag_p50_s") is None:
        return f"{row} #{repeat}: no client samples"
    ms = {k: 1e3 * (client.get(k) or 0.0) for k in ("lag_p50_s", "lag_mean_s", "lag_excess_s")}
    step = client.get("median_step_s")
    against = (
        f" = {ms['lag_excess_s'] / (1e3 * step):.1%} of the median step ({1e3 * step:.2f} ms)"
        if step
        else " (no step time)"
    )
    return (
        f"{row} #{repeat}: lag p50 {ms['lag_p50_s']:.2f} ms, mean {ms['lag_mean_s']:.2f} ms, "
        f"excess {ms['lag_excess_s']:.2f} ms{against}"
        + (", limits the step time" if client.get("limits_step_time") else "")
    )


def _outcome(
    run_dir: Path, row: str, repeat: int, device: str, lag_lines: list[str] | None = None
) -> fm.Outcome:
    """One recorded run, analysed again: its findings as diagnose --json would print them
    (and its client lag line onto `lag_lines`, when given)."""
    size = fm.SIZES[device]
    out = fm.Outcome(row, repeat, device, run_dir=str(run_dir))
    try:
        run = load_run(run_dir)
        a = analyze_run(run)
    except (RunDirError, OSError, ValueError) as e:
        out.null_reason = size.null_rows.get(row)
        out.error = f"cannot re-analyse {run_dir}: {e}"
        return out
    # the run's own workload: a row that has since moved to another is judged as it ran
    out.workload = str(run.info.args.get("workload") or "")
    out.null_reason = fm.null_reason(size, device, row, out.workload or None)
    out.findings = [
        {
            "id": f.id,
            "cause": f.cause,
            "candidates": list(f.candidates),
            "ruled_out": [{"id": r.id, "reason": r.reason} for r in f.ruled_out],
        }
        for f in a.findings
    ]
    if lag_lines is not None:
        lag_lines.append(_lag_line(row, repeat, a.client))
    out.top_cause = a.findings[0].cause if a.findings else None
    out.speculation, out.decode_tps = a.speculation, a.decode_tps
    return out


def _runs(root: Path) -> list[tuple[Path, str, int]]:
    """(diagnose dir, row, repeat) for every `ROW-REPEAT/diagnose` under root, in table order."""
    found = []
    for d in sorted(root.iterdir()):
        m = RUN_NAME.match(d.name)
        if m and (d / "diagnose").is_dir():
            found.append((d / "diagnose", m["row"], int(m["repeat"])))
    order = {r.name: i for i, r in enumerate(fm.ROWS)}
    return sorted(found, key=lambda x: (order.get(x[1], len(order)), x[2]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "runs",
        type=Path,
        help="the runs: a tar (.tgz, .tar.xz) of the matrix's work folder, or a folder",
    )
    ap.add_argument("--device", choices=sorted(fm.SIZES), default="cuda")
    ap.add_argument("--out", type=Path, help="write every outcome here (JSON)")
    ap.add_argument("--client-lag", action="store_true", help="print each run's client lag")
    args = ap.parse_args(argv)
    if not args.runs.exists():
        print(f"bench: {args.runs}: no such file or folder", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.runs
        if root.is_file():
            with tarfile.open(root) as tar:
                tar.extractall(tmp, filter="data")
            root = Path(tmp)
        runs = _runs(root)
        if not runs:
            print(f"bench: no ROW-REPEAT/diagnose run folders in {args.runs}", file=sys.stderr)
            return 2
        lags: list[str] | None = [] if args.client_lag else None
        outcomes = [_outcome(d, row, rep, args.device, lags) for d, row, rep in runs]
    wall = time.perf_counter() - t0
    print(fm.summary(outcomes, wall))
    if lags:
        print("client lag (the guard: excess over the median > 10% of the median step):")
        print("\n".join(f"  {line}" for line in lags))
    if args.out:
        obj = fm.outcomes_json(outcomes, fm.SIZES[args.device], args.device, wall)
        args.out.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
