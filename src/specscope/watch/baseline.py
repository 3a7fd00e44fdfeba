"""`--baseline RUN_DIR`: the detector's baseline from a recorded run (a probe or a diagnosis
of the same server when it was healthy) instead of the warm-up: its finished requests read as
canaries. The run's prompt and output lengths should match the canary's (a step time depends
on both); the baseline's source names the run so the alert says what it compared against."""

from __future__ import annotations

from pathlib import Path

from specscope.analysis.watch.baseline import Baseline, learn_baseline
from specscope.analysis.watch.sample import sample_from_trace
from specscope.telemetry.server_info import max_commit_len_from
from specscope.trace.rundir import RunDirError, RunDirReader


class BaselineError(ValueError):
    """The run directory gives no baseline (one line, exit 2)."""


def baseline_from_run(path: Path) -> Baseline:
    try:
        reader = RunDirReader(path)
        info = reader.info()
        traces, _ = reader.requests()
    except RunDirError as e:
        raise BaselineError(f"--baseline {path}: {e}") from None
    cap = max_commit_len_from(info.server_info or {})
    samples = [
        s for i, t in enumerate(traces) if (s := sample_from_trace(t, float(i), cap)) is not None
    ]
    found = learn_baseline(samples, source=str(path))
    if found is None:
        raise BaselineError(
            f"--baseline {path}: {len(samples)} usable requests, a baseline needs at least 5"
        )
    return found
