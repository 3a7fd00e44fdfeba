"""Commit length before and inside repetition loops, request by request, for diagnose run dirs.

The figures in docs/faults.md "On the H200" (clean n-gram 4.7-5.0 tokens a step inside the loops,
prompt-only-ngram 1.0-1.5, draft window 4.0) come from this over the H200 matrix's run
directories (bench/results/fault_matrix_h200_runs.tar.xz):

    mkdir -p /tmp/h200 && tar xJf bench/results/fault_matrix_h200_runs.tar.xz -C /tmp/h200
    .venv/bin/python bench/loop_commits.py /tmp/h200/position-0/diagnose /tmp/h200/clean-ngram-0/diagnose
"""

from __future__ import annotations

import sys

from specscope.analysis.steps.reconstruct import reconstruct_steps
from specscope.analysis.steps.repetition import loop_start_position
from specscope.trace import load_run

MIN_STEPS = 20  # shorter requests say nothing about a loop


def _mean(xs: list[int]) -> str:
    return f"{sum(xs) / len(xs):.2f} ({len(xs)} steps)" if xs else "-"


def main(run_dirs: list[str]) -> int:
    for run_dir in run_dirs:
        print(run_dir)
        for t in load_run(run_dir).requests:
            steps = reconstruct_steps(t).steps
            if len(steps) < MIN_STEPS:
                continue
            start = loop_start_position(t)
            before = [s.commit_len for s in steps if start is None or s.output_pos < start]
            inside = [s.commit_len for s in steps if start is not None and s.output_pos >= start]
            print(
                f"  {t.spec.tag[:26]:26s} loop from token {start}: before {_mean(before)}, "
                f"inside {_mean(inside)}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
