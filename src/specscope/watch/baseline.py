"""The watch's references from recorded runs: `--baseline RUN_DIR` (the detector's baseline, a
probe or a diagnosis of the same server when it was healthy, instead of the warm-up) and the
plain reference speculation's speedup is measured against (`--plain-baseline RUN_DIR`: a probe
or a diagnosis of the same server without speculation). Either run's finished requests are
read as canaries, so its prompt and output lengths should match the canary's (a step time
depends on both); each reference names its run so an alert or a speedup says what it compared
against.

One rule decides what a run given to `--baseline` is: a run that did not speculate (its
requests committed at most PLAIN_COMMIT tokens a step) is a plain run, and a plain run is the
speedup's reference, never the detector's (a speculative server's commit length and step time
would both read as alarms against it), so the detector learns from the warm-up instead; a run
that speculated is the detector's baseline, as before. `--plain-baseline` refuses a run that
speculated (its step time is not a plain step's)."""

from __future__ import annotations

from pathlib import Path

from specscope.analysis.watch.baseline import Baseline, learn_baseline
from specscope.analysis.watch.sample import CanarySample, sample_from_trace
from specscope.analysis.watch.speedup import PlainReference, PlainReferenceError, plain_reference
from specscope.telemetry.server_info import max_commit_len_from
from specscope.trace.rundir import RunDirError, RunDirReader


class BaselineError(ValueError):
    """The run directory gives no baseline (one line, exit 2)."""


def run_samples(path: Path, flag: str = "--baseline") -> list[CanarySample]:
    """The run's finished requests as canary samples (in their recorded order)."""
    try:
        reader = RunDirReader(path)
        info = reader.info()
        traces, _ = reader.requests()
    except RunDirError as e:
        raise BaselineError(f"{flag} {path}: {e}") from None
    cap = max_commit_len_from(info.server_info or {})
    return [
        s for i, t in enumerate(traces) if (s := sample_from_trace(t, float(i), cap)) is not None
    ]


def _baseline(path: Path, samples: list[CanarySample]) -> Baseline:
    found = learn_baseline(samples, source=str(path))
    if found is None:
        raise BaselineError(
            f"--baseline {path}: {len(samples)} usable requests, a baseline needs at least 5"
        )
    return found


def baseline_from_run(path: Path) -> Baseline:
    """The detector's baseline from a recorded run, whatever it speculated."""
    return _baseline(path, run_samples(path))


def plain_from_run(path: Path, flag: str = "--plain-baseline") -> PlainReference:
    """The speedup's plain reference from a recorded run; refused if it speculated."""
    try:
        return plain_reference(run_samples(path, flag), source=str(path))
    except PlainReferenceError as e:
        raise BaselineError(f"{flag} {path}: {e}") from None


def references(
    baseline_dir: Path | None, plain_dir: Path | None
) -> tuple[Baseline | None, PlainReference | None]:
    """The detector's baseline and the plain reference from the two flags, by the rule above."""
    plain = plain_from_run(plain_dir) if plain_dir is not None else None
    if baseline_dir is None:
        return None, plain
    samples = run_samples(baseline_dir)
    base = _baseline(baseline_dir, samples)
    if base.speculating:
        return base, plain
    if plain is not None:
        raise BaselineError(
            f"--baseline {baseline_dir}: a plain run (it did not speculate) beside "
            "--plain-baseline: give the plain run once, as --plain-baseline"
        )
    try:
        return None, plain_reference(samples, source=str(baseline_dir))
    except PlainReferenceError as e:
        raise BaselineError(f"--baseline {baseline_dir}: {e}") from None
