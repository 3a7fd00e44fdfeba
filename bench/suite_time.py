"""The test suite's wall time against an older revision, on the same tests, side by side.

    python bench/suite_time.py [--before 65e583d] [--tests PATH ...] [--workers 3]

The older revision is checked out in a temporary worktree and set up there (`make setup
peer-models`); both sides collect their test ids, and the ones both have (plus, on this side,
every test of the modules named with --successor: what moved or was re-parametrised) are run:
the older side as its `make test` ran them (serially), this side as `make test` does now
(pytest-xdist, the timed lane). Prints both times, both pass counts and the ratio. Run it on an
otherwise idle machine: it times the whole machine. --tests narrows both sides to some paths
(a quick check of the script itself).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUCCESSORS = (
    "tests/test_peer_cli_diagnose.py",
    "tests/test_diagnose_baseline.py",
    "tests/test_engine_spec_lossless.py",
)


def _ids(root: Path, python: Path, paths: list[str]) -> set[str]:
    out = subprocess.run(
        [str(python), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths],
        cwd=root,
        capture_output=True,
        text=True,
    )
    return {line for line in out.stdout.splitlines() if "::" in line}


def _run(root: Path, python: Path, ids: list[str], extra: list[str]) -> tuple[float, str]:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(ids) + "\n")
    start = time.perf_counter()
    proc = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, f"@{f.name}"],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "CI": "true"},
    )
    seconds = time.perf_counter() - start
    os.unlink(f.name)
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    return seconds, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="65e583d", help="the older revision")
    ap.add_argument("--tests", nargs="*", default=["tests"], help="paths both sides run")
    ap.add_argument("--successor", nargs="*", default=list(SUCCESSORS))
    ap.add_argument("--workers", default="3")
    args = ap.parse_args()
    now_py = REPO / ".venv" / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix="suite-time-") as tmp:
        old = Path(tmp) / "old"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(old), args.before],
            cwd=REPO,
            check=True,
        )
        try:
            subprocess.run(
                ["make", "setup", "peer-models"], cwd=old, check=True, stdout=subprocess.DEVNULL
            )
            old_py = old / ".venv" / "bin" / "python"
            old_ids = _ids(old, old_py, args.tests)
            now_ids = _ids(REPO, now_py, args.tests)
            common = sorted(old_ids & now_ids)
            successors = sorted(
                i for i in now_ids - old_ids if i.split("::")[0] in set(args.successor)
            )
            t_old, s_old = _run(old, old_py, sorted(old_ids), [])
            t_now, s_now = _run(
                REPO, now_py, common + successors, ["-n", args.workers, "--dist", "loadfile"]
            )
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO)
    print(f"before {args.before}: {len(old_ids)} tests, serial: {t_old:7.1f} s  ({s_old})")
    print(
        f"now: {len(common)} of them + {len(successors)} successors, -n {args.workers}: "
        f"{t_now:7.1f} s  ({s_now})"
    )
    print(f"time now / before: {t_now / t_old:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
