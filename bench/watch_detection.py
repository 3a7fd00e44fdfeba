"""The watch's detector on virtual time: its false-alarm rate over stationary watched time and
its detection delay for the story's change and for one half its size.

Virtual time, not a time-scaled twin: every canary is one request of the twin's scenario
simulated step by step without sleeping (twin.scenario.simulate_request_steps: the same draws
the live twin makes at concurrency 1), read into a sample exactly as the live watch reads a
stream (analysis.watch.sample) and fed to the same Detector with its virtual end time. A
canary every --probe-every seconds (10), 512 prompt + 256 output tokens, a 60 s warm-up.

- False alarms: --watches independent watches of --hours each (default 10 x 24 h = 240 h) of
  `healthy`, each with its own warm-up baseline and its own requests; every alert counts.
- Delays: --runs watches of `healthy` switching at 90 s to `seed-regression` (the story) and
  to `half` (every numeric table of the two scenarios halfway between them: about half the
  story's log step-time ratio); the delay is alert time - switch time, with the factor named,
  and alerts before the switch are counted as false.
- --noisy: the same with content-dependent acceptance and correlated step noise added to both
  scenarios (request_sigma 0.3, stretch_sigma 0.3, noise_rho 0.5, step noise x3): a server
  whose canaries vary as real text does, which the twin's scenarios do not by default.

    PYTHONPATH=src python bench/watch_detection.py [--watches 10] [--hours 24] [--runs 100]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any

from specscope.analysis.watch.detector import Alert, Detector, DetectorConfig
from specscope.analysis.watch.sample import CanarySample, sample_from_steps
from specscope.twin.scenario import Scenario, load_scenario, simulate_request_steps

PROMPT, OUTPUT = 512, 256
SWITCH_S = 90.0
GIVE_UP_S = 600.0


def _mix(a: Any, b: Any, w: float) -> Any:
    """a and b's numbers (and lists of numbers) w of the way from a to b."""
    if isinstance(a, dict):
        return {k: _mix(a[k], b[k], w) for k in a}
    if isinstance(a, list) and a and isinstance(a[0], float):
        return [x + w * (y - x) for x, y in zip(a, b, strict=True)]
    if isinstance(a, float) and not isinstance(a, bool):
        return a + w * (b - a)
    return a


def halfway(a: Scenario, b: Scenario) -> Scenario:
    data = _mix(a.model_dump(), b.model_dump(), 0.5)
    data["name"] = f"half({a.name}->{b.name})"
    return Scenario.model_validate(data)


def noisy(sc: Scenario) -> Scenario:
    acc = sc.acceptance.model_copy(
        update={"request_sigma": 0.3, "stretch_sigma": 0.3, "stretch_steps": 20.0}
    )
    step = sc.step.model_copy(
        update={"noise_rho": 0.5, "noise_sigma": min(2.0, 3 * sc.step.noise_sigma)}
    )
    return sc.model_copy(update={"acceptance": acc, "step": step})


def canary(sc: Scenario, t: float, seed: int) -> CanarySample:
    steps = [(s.commit_len, s.step_s) for s in simulate_request_steps(sc, PROMPT, OUTPUT, seed)]
    sample = sample_from_steps(t, steps)
    assert sample is not None
    return sample


def false_alarms(sc: Scenario, watches: int, hours: float, every: float) -> list[Alert]:
    """Alerts over `watches` stationary watches of `hours` each."""
    alerts: list[Alert] = []
    n = int(hours * 3600 / every)
    for w in range(watches):
        det = Detector(DetectorConfig(probe_every_s=every), t0=0.0)
        for i in range(1, n + 1):
            seed = (w + 1) * 10_000_000 + i
            alerts += [e for e in det.observe(canary(sc, i * every, seed)) if isinstance(e, Alert)]
    return alerts


def delay(
    before: Scenario, after: Scenario, run: int, every: float
) -> tuple[float | None, str, int]:
    """(delay in s or None past GIVE_UP_S, the first alert's factor, alerts before the switch)."""
    det = Detector(DetectorConfig(probe_every_s=every), t0=0.0)
    early = 0
    i = 0
    while True:
        i += 1
        t = i * every
        if t - SWITCH_S > GIVE_UP_S:
            return None, "", early
        sc = before if t <= SWITCH_S else after
        for e in det.observe(canary(sc, t, 7_000_000_000 + run * 100_000 + i)):
            if not isinstance(e, Alert):
                continue
            if t <= SWITCH_S:
                early += 1
            else:
                return t - SWITCH_S, e.factor, early


def true_ratio(a: Scenario, b: Scenario, n: int = 300) -> tuple[float, float]:
    """The change's size: geometric-mean ratios b/a of a canary's commit length and step time."""
    la = [canary(a, 0.0, s) for s in range(n)]
    lb = [canary(b, 0.0, s) for s in range(n)]

    def gm(xs: list[float]) -> float:
        return math.exp(statistics.fmean(math.log(x) for x in xs))

    return (
        gm([s.commit_len for s in lb]) / gm([s.commit_len for s in la]),
        gm([s.step_s for s in lb]) / gm([s.step_s for s in la]),
    )


def report_delays(name: str, before: Scenario, after: Scenario, runs: int, every: float) -> None:
    commit, step = true_ratio(before, after)
    got = [delay(before, after, r, every) for r in range(runs)]
    delays = sorted(d for d, _, _ in got if d is not None)
    factors = {f: sum(1 for _, g, _ in got if g == f) for f in {g for _, g, _ in got if g}}
    early = sum(e for _, _, e in got)
    within60 = sum(1 for d in delays if d <= 60)
    print(
        f"{name:<28} commit x{commit:.3f} step x{step:.3f}  detected {len(delays)}/{runs}  "
        f"within 60 s {within60}/{runs}  delay median {statistics.median(delays) if delays else float('nan'):.0f} s "
        f"p90 {delays[int(0.9 * (len(delays) - 1))] if delays else float('nan'):.0f} s "
        f"max {max(delays) if delays else float('nan'):.0f} s  factors {factors}  "
        f"alerts before the switch {early}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--watches", type=int, default=10)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--probe-every", type=float, default=10.0)
    ap.add_argument("--noisy", action="store_true")
    a = ap.parse_args()
    healthy, story = load_scenario("healthy"), load_scenario("seed-regression")
    if a.noisy:
        healthy, story = noisy(healthy), noisy(story)
    half = halfway(healthy, story)
    t0 = time.perf_counter()
    alerts = false_alarms(healthy, a.watches, a.hours, a.probe_every)
    hours = a.watches * a.hours
    by = {f: sum(1 for x in alerts if x.factor == f) for f in {x.factor for x in alerts}}
    print(
        f"{'noisy ' if a.noisy else ''}healthy, stationary: {hours:g} h watched "
        f"({a.watches} x {a.hours:g} h, a canary every {a.probe_every:g} s): {len(alerts)} "
        f"false alarms = {24 * len(alerts) / hours:.3f} per 24 h {by}"
    )
    report_delays("healthy -> seed-regression", healthy, story, a.runs, a.probe_every)
    report_delays("healthy -> half of it", healthy, half, a.runs, a.probe_every)
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
