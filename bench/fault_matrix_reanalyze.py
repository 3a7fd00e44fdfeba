"""Re-analyse a fault matrix's recorded runs with this checkout's analysis: the confusion table
again, without a server or a GPU.

The H200 matrix (docs/faults.md "On the H200") kept every run's diagnose directory
(bench/results/fault_matrix_h200_runs.tgz: requests, server log, telemetry). A change to the
diagnosis is checked against those real runs here, row by row, with the same verdict
(`validation.faults.is_right`) and the device's null rows as the matrix itself:

    .venv/bin/python bench/fault_matrix_reanalyze.py bench/results/fault_matrix_h200_runs.tgz \\
        --device cuda [--out FILE.json]
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


def _outcome(run_dir: Path, row: str, repeat: int, device: str) -> fm.Outcome:
    """One recorded run, analysed again: its findings as diagnose --json would print them."""
    size = fm.SIZES[device]
    out = fm.Outcome(row, repeat, device, run_dir=str(run_dir))
    out.null_reason = size.null_rows.get(row)
    try:
        a = analyze_run(load_run(run_dir))
    except (RunDirError, OSError, ValueError) as e:
        out.error = f"cannot re-analyse {run_dir}: {e}"
        return out
    out.findings = [
        {
            "id": f.id,
            "cause": f.cause,
            "candidates": list(f.candidates),
            "ruled_out": [{"id": r.id, "reason": r.reason} for r in f.ruled_out],
        }
        for f in a.findings
    ]
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
    ap.add_argument("runs", type=Path, help="the runs: a .tgz as the matrix wrote it, or a folder")
    ap.add_argument("--device", choices=sorted(fm.SIZES), default="cuda")
    ap.add_argument("--out", type=Path, help="write every outcome here (JSON)")
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
        outcomes = [_outcome(d, row, rep, args.device) for d, row, rep in runs]
    wall = time.perf_counter() - t0
    print(fm.summary(outcomes, wall))
    if args.out:
        obj = fm.outcomes_json(outcomes, fm.SIZES[args.device], args.device, wall)
        args.out.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
