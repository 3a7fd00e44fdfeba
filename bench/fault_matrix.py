"""The fault matrix: diagnose engine servers with known faults and score the top cause.

For each row (a seeded fault, or a clean control: specscope.validation.faults.ROWS) and repeat:
start `specscope serve --backend engine` with the row's flags, run `specscope diagnose URL
--quick --no-ignore-eos --json` against it, stop the server. Prints the confusion table (rows:
the seeded fault; columns: the top causes seen), right/total per row against the row's expected
causes, the clean rows' findings, the overall share right and the wall time. A failed run is
recorded with its one-line reason and counts as wrong. Sizes per device:
faults.SIZES (overridable below). Goal (issue #35): the top cause right on every faulted row,
no fault's cause on the clean rows, on this CPU and on the H200.

    .venv/bin/python bench/fault_matrix.py [--device cpu|cuda] [--faults a,b] [--repeats N]
        [--out FILE.json [--resume]] [--budget-s S] [--timeout S] [--dry-run]
        [--prompt-tokens P] [--max-tokens N] [--host-us US] [--window W] [--workload W]
        [--concurrency LEVELS] [--graph-batch B]

The load rows (`clean-load`, `graph-off`, `batch-accept`: validation.faults.Row.load) show only
with several requests in flight: their diagnose adds `--concurrency LEVELS` (the size's, 1,4).

`--workload W` tries the rows on another workload (e.g. the window row on `prose-edit`, whose
answer copies the prompt from its start): a row's null figure was measured on its own workload,
so an overridden row is judged as a faulted row unless it was measured null on that workload
(validation.faults.NULL_ON_WORKLOAD).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path

from specscope.probe.workloads import BUILT_IN
from specscope.validation import faults as fm


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=sorted(fm.SIZES), default="cpu")
    ap.add_argument(
        "--faults",
        default="",
        help=f"rows, comma-separated (default all: {', '.join(fm.ROWS_BY_NAME)})",
    )
    ap.add_argument("--repeats", type=int, default=1, help="diagnoses per row")
    ap.add_argument("--out", type=Path, help="write every outcome here (JSON)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one diagnose may run")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--prompt-tokens", type=int, help="override the device's prompt length")
    ap.add_argument("--max-tokens", type=int, help="override the device's generation length")
    ap.add_argument("--host-us", type=float, help="override host-per-token=US")
    ap.add_argument("--window", type=int, help="override --draft-window W")
    ap.add_argument("--concurrency", help="override the load rows' levels, e.g. 1,2,4")
    ap.add_argument("--graph-batch", type=int, help="override graph-off-above=B")
    ap.add_argument("--workload", help="run every selected row on this workload instead")
    ap.add_argument("--work-dir", type=Path, help="server logs and run dirs (default: a temp dir)")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs already in --out and run only the missing (row, repeat) pairs",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="start no run that would end past this many seconds (by the longest run so far)",
    )
    return ap.parse_args(argv)


def _size(args: argparse.Namespace) -> fm.Size:
    """The device's size with the command line's overrides (a row moved to another workload
    is null there only where measured so: validation.faults.null_reason)."""
    size = fm.SIZES[args.device]
    given: dict[str, object] = {
        "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens,
        "host_us": args.host_us,
        "window": args.window,
        "concurrency": args.concurrency,
        "graph_batch": args.graph_batch,
    }
    return dataclasses.replace(size, **{k: v for k, v in given.items() if v is not None})


def _dry_run(rows: list[fm.Row], size: fm.Size, device: str, work: Path, repeats: int) -> None:
    for row in rows:
        run = work / f"{row.name}-0"
        print(f"# {row.name} (x{repeats})")
        print(shlex.join(fm.serve_argv(row, size, device, run / "server.log")))
        print(shlex.join(fm.diagnose_argv(row, size, "URL", run / "diagnose")))


def _resumed(args: argparse.Namespace) -> tuple[list[fm.Outcome], float]:
    """The runs an earlier invocation wrote to --out (with --resume), and their wall time."""
    if not (args.resume and args.out is not None and args.out.exists()):
        return [], 0.0
    data = json.loads(args.out.read_text(encoding="utf-8"))
    done = [fm.outcome_from_json(d) for d in data.get("outcomes", [])]
    print(f"resuming: {len(done)} runs already in {args.out}", file=sys.stderr)
    return done, float(data.get("wall_s") or 0.0)


def _write(
    args: argparse.Namespace, outcomes: list[fm.Outcome], size: fm.Size, wall: float
) -> None:
    if args.out is not None:
        data = fm.outcomes_json(outcomes, size, args.device, wall)
        args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def _stop_on_sigterm() -> None:
    """`timeout` and a device call's limit send SIGTERM: stop like Ctrl-C (the server is
    stopped, the finished runs reported), not mid-write."""

    def _raise(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _raise)


def _run(rows: list[fm.Row], size: fm.Size, args: argparse.Namespace, work: Path) -> int:
    outcomes, earlier_wall = _resumed(args)
    done = {(o.row, o.repeat) for o in outcomes}
    todo = [
        (rep, row) for rep in range(args.repeats) for row in rows if (row.name, rep) not in done
    ]
    t0 = time.perf_counter()
    longest = 0.0
    stopped = ""
    _stop_on_sigterm()
    try:
        for rep, row in todo:
            elapsed = time.perf_counter() - t0
            if args.budget_s and elapsed + 1.2 * longest > args.budget_s:
                stopped = f"stopped before {row.name} #{rep}: it would end past --budget-s {args.budget_s:g}"
                break
            print(f"{row.name} #{rep}: serving and diagnosing ...", file=sys.stderr, flush=True)
            o = fm.run_row(row, size, args.device, work, args.timeout, repeat=rep)
            longest = max(longest, o.wall_s)
            verdict = "right" if fm.is_right(row, o) else "wrong"
            said = o.error or f"top cause {o.top_cause}, findings {o.finding_ids}"
            print(f"  {verdict} ({o.wall_s:.0f} s): {said}", file=sys.stderr, flush=True)
            outcomes.append(o)
            _write(args, outcomes, size, earlier_wall + time.perf_counter() - t0)
    except KeyboardInterrupt:  # run_row has stopped its server; report what finished
        stopped = "interrupted: reporting the runs that finished"
    wall = earlier_wall + time.perf_counter() - t0
    left = len(todo) - (len(outcomes) - len(done))
    if stopped:
        print(f"{stopped} ({left} runs left; --resume goes on)", file=sys.stderr)
    print(fm.summary(outcomes, wall))
    _write(args, outcomes, size, wall)
    if args.out is not None:
        print(f"wrote {args.out}", file=sys.stderr)
    return 130 if stopped.startswith("interrupted") else 0


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    try:
        rows = fm.select_rows(args.faults)
    except fm.UnknownRow as exc:
        print(f"fault_matrix: {exc}", file=sys.stderr)
        return 2
    if args.repeats < 1 or args.timeout <= 0:
        print("fault_matrix: --repeats must be >= 1 and --timeout > 0", file=sys.stderr)
        return 2
    size = _size(args)
    if args.workload:
        if args.workload not in BUILT_IN:
            known = ", ".join(BUILT_IN)
            print(f"fault_matrix: unknown --workload {args.workload!r} ({known})", file=sys.stderr)
            return 2
        rows = [dataclasses.replace(r, workload=args.workload) for r in rows]
    if any(r.name == "window" for r in rows) and fm.window_gap(size) is None:
        print(
            f"warning: --window {size.window} is not between two of the context sweep's spans "
            f"{fm.sweep_spans(size)}: the window row cannot show a cliff",
            file=sys.stderr,
        )
    if args.dry_run:
        _dry_run(rows, size, args.device, args.work_dir or Path("WORK_DIR"), args.repeats)
        return 0
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="fault_matrix-"))
    print(f"fault matrix: device {args.device}, {size}, files under {work}", file=sys.stderr)
    return _run(rows, size, args, work)


if __name__ == "__main__":
    sys.exit(main())
