"""The watch's change detector: a warm-up baseline, one CUSUM per factor, the speculation_off
rule, and the alerts they raise. Pure: every input carries its own time, so tests and the bench
drive it on virtual time exactly as the live loop does.

Factors and directions (one-sided: only what makes speculation pay less is alarmed):
- `commit_len`: log commit length per canary falls;
- `step_time`: log step time per canary rises;
- `speculation_off`: a baseline that drafted, then OFF_SAMPLES canaries in a row at one token
  a step for which the server reports no draft (a rule, not a CUSUM: plain decoding is not a
  small shift but another regime). The server's per-request draft count is what tells an
  n-gram drafter that found little to draft in one canary's prompt (vLLM's CPU peer: 1.03
  tokens a step, 20 draft tokens proposed in 5 steps) from a server that stopped drafting.

Stated error rate: each CUSUM's threshold is set so that its in-control run length is
samples_per_day x factors / false_alarms_per_day canaries (cusum.threshold_for), with the
baseline's spread taken at its upper bound (baseline.py) and its reference widened by the
baseline mean's own uncertainty (MEAN_GUARD_Z); bench/watch_detection.py measures the rate
that results. After an alert a factor stays quiet until REARM_SAMPLES canaries in a
row sit within the shift of interest of the baseline again (a `recovered` event), so a
persisting change raises one alert, not one per canary.

The warm-up baseline goes on learning from each canary after the warm-up until it holds
refine_n canaries or an alarm fires (`_refine`): a change in that time is still tested against
the baseline learned so far, and a canary is learned in only REFINE_DELAY canaries after it
ended, if no alarm fired meanwhile, and if it was typical (within REFINE_Z spreads, no
statistic half-way up: `_typical`): a change that alarms within a minute is never learned; a
smaller one in those ten minutes partly is, which delays its alert and makes its ratio
understate it. No canary is left out for being on one side, so the mean is not biased."""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

from specscope.analysis.watch.baseline import PLAIN_COMMIT, Baseline, Series, learn_baseline
from specscope.analysis.watch.causes import SPECULATION_OFF, commit_cause, step_cause
from specscope.analysis.watch.cusum import Cusum, threshold_for
from specscope.analysis.watch.sample import CanarySample

Z95 = 1.959964
OFF_SAMPLES = 2
REARM_SAMPLES = 6
KEEP = 4096  # observations kept per factor (memory bounded over days)
# The baseline's mean is itself an estimate (six canaries over a 60 s warm-up): the reference
# k is widened by this many of its standard errors (a one-sided 95% bound), else a warm-up
# that read the mean low by one standard error turns ordinary canaries into a slow alarm.
MEAN_GUARD_Z = 1.645
REFINE_Z = 6.0  # a canary further than this from the baseline is not learned into it
# A canary joins the refined baseline only this many canaries later, if no alarm fired
# meanwhile: a change is tested for a minute before it could be learned in.
REFINE_DELAY = 6


@dataclass(frozen=True)
class DetectorConfig:
    warmup_s: float = 60.0  # the baseline is learned over this long (or a recorded run)
    probe_every_s: float = 10.0  # the canary's period: turns a rate per day into samples
    min_shift: float = math.log(1.10)  # the smallest change of interest, log ratio (10%)
    false_alarms_per_day: float = 0.1  # the design rate, all factors together
    refine_n: int = 60  # canaries a warm-up baseline keeps learning from (no alarm meanwhile)

    @property
    def target_arl0(self) -> float:
        """In-control canaries per false alarm, per one-sided test (two tests share the rate)."""
        per_day = 86400.0 / self.probe_every_s
        return per_day * 2 / self.false_alarms_per_day


@dataclass(frozen=True)
class Alert:
    factor: str  # commit_len | step_time | speculation_off
    ratio: float  # observed / baseline since the change (commit length or step time)
    ci: tuple[float, float]
    since: float  # the change-point estimate: first canary after the statistic left 0
    t: float  # when the alarm was raised
    cause: str | None
    candidates: tuple[str, ...]
    reason: str
    samples: int  # canaries since the change
    statistic: float
    threshold: float


@dataclass(frozen=True)
class Recovery:
    factor: str
    t: float


@dataclass
class _Factor:
    """One factor's test and what it keeps: (time, value, trend) of recent canaries."""

    name: str
    series: Series
    trend: Series
    cusum: Cusum
    kept: deque[tuple[float, float, float]] = field(default_factory=lambda: deque(maxlen=KEEP))
    alerting: bool = False
    calm: int = 0

    def post(self) -> list[tuple[float, float, float]]:
        """The canaries since the change-point estimate."""
        first = self.cusum.n - len(self.kept)
        return [v for i, v in enumerate(self.kept, start=first) if i >= self.cusum.since]


def _ratio_ci(series: Series, post: list[float]) -> tuple[float, tuple[float, float]]:
    """exp(mean since the change - baseline mean) with a normal interval that carries both
    the post-change spread (the baseline's bound with fewer than 3 canaries) and the
    baseline's own uncertainty."""
    d = statistics.fmean(post) - series.mean
    var = statistics.variance(post) if len(post) >= 3 else series.sd_eff**2
    se = math.sqrt(var / len(post) + series.sd_eff**2 / series.n)
    return math.exp(d), (math.exp(d - Z95 * se), math.exp(d + Z95 * se))


class Detector:
    """Feed it canary samples in time order (`observe`); it learns the baseline over the
    warm-up (unless given one) and returns the alerts and recoveries each sample raises."""

    def __init__(
        self,
        config: DetectorConfig | None = None,
        baseline: Baseline | None = None,
        t0: float | None = None,
    ) -> None:
        self.config = config or DetectorConfig()
        self.t0 = t0
        self.baseline: Baseline | None = None
        self.warmup: deque[CanarySample] = deque(maxlen=KEEP)
        self.factors: dict[str, _Factor] = {}
        self._off: deque[CanarySample] = deque(maxlen=OFF_SAMPLES)
        self.off_alerting = False
        self.refining: bool | None = None  # None: not started; False: done (or a given one)
        self._unconfirmed: deque[CanarySample] = deque()  # canaries waiting REFINE_DELAY
        if baseline is not None:
            self._arm(baseline)

    @property
    def state(self) -> str:
        return "warmup" if self.baseline is None else "watching"

    def statistics(self) -> dict[str, tuple[float, float]]:
        """Each factor's CUSUM statistic and threshold (what a window event shows)."""
        return {name: (f.cusum.value, f.cusum.h) for name, f in self.factors.items()}

    def _arm(self, baseline: Baseline) -> None:
        """Set (or, while refining, update) each factor's series, reference and threshold; a
        factor's running statistic is kept."""
        self.baseline = baseline
        for name, series, trend, sign in (
            ("commit_len", baseline.commit, baseline.commit_trend, -1),
            ("step_time", baseline.step, baseline.step_trend, +1),
        ):
            k = self.config.min_shift / 2 / series.sd_eff + MEAN_GUARD_Z / math.sqrt(series.n)
            h = threshold_for(k, self.config.target_arl0)
            old = self.factors.get(name)
            if old is None:
                self.factors[name] = _Factor(name, series, trend, Cusum(k, h, sign))
            else:
                old.series, old.trend, old.cusum.k, old.cusum.h = series, trend, k, h

    def _refine(self, s: CanarySample) -> None:
        """A warm-up baseline keeps learning from every canary until it holds refine_n of them
        (ten minutes at the default period), unless an alarm fires first: six warm-up canaries
        read the mean and spread too roughly for a rate of false alarms per day to hold."""
        b = self.baseline
        if b is None or b.source != "warm-up" or self.refining is False:
            return
        if any(f.alerting for f in self.factors.values()) or self.off_alerting:
            self.refining = False
            self.warmup.clear()
            self._unconfirmed.clear()
            return
        self._unconfirmed.append(s)
        if len(self._unconfirmed) <= REFINE_DELAY:
            return
        oldest = self._unconfirmed.popleft()
        if not self._typical(oldest):
            return
        self.warmup.append(oldest)
        learned = learn_baseline(list(self.warmup))
        if learned is not None:
            self._arm(learned)
        if len(self.warmup) >= self.config.refine_n:
            self.refining = False
            self.warmup.clear()
            self._unconfirmed.clear()

    def _typical(self, s: CanarySample) -> bool:
        """Whether a canary may join the baseline being refined: within REFINE_Z of it on
        both factors (a symmetric cut, so it does not bias the mean) while no statistic is
        half-way to its threshold (a change under way is not learned in)."""
        if any(f.cusum.value > f.cusum.h / 2 for f in self.factors.values()):
            return False
        step = self.factors["step_time"].series.z(s.log_step)
        commit = self.factors["commit_len"].series.z(s.log_commit) if s.reliable else 0.0
        return abs(step) <= REFINE_Z and abs(commit) <= REFINE_Z

    def observe(self, s: CanarySample) -> list[Alert | Recovery]:
        if self.t0 is None:
            self.t0 = s.t
        if self.baseline is None:
            self.warmup.append(s)
            if s.t - self.t0 >= self.config.warmup_s:
                learned = learn_baseline(list(self.warmup))
                if learned is not None:
                    self._arm(learned)
                    self.refining = True
            return []
        events: list[Alert | Recovery] = self._speculation(s)
        if s.reliable and not self.off_alerting:
            events += self._feed(self.factors["commit_len"], s.log_commit, s.commit_trend, s.t)
        events += self._feed(self.factors["step_time"], s.log_step, s.step_trend, s.t)
        self._refine(s)
        return events

    def _feed(self, f: _Factor, value: float, trend: float, t: float) -> list[Alert | Recovery]:
        fired = f.cusum.update(f.series.z(value))
        f.kept.append((t, value, trend))
        if f.alerting:
            near = f.cusum.sign * (value - f.series.mean) < self.config.min_shift
            f.calm = f.calm + 1 if near else 0
            if f.calm < REARM_SAMPLES:
                return []
            f.alerting, f.calm = False, 0
            f.cusum.reset()
            return [Recovery(f.name, t)]
        if not fired:
            return []
        post = f.post() or [f.kept[-1]]
        ratio, ci = _ratio_ci(f.series, [v for _, v, _ in post])
        guess = (commit_cause if f.name == "commit_len" else step_cause)(
            f.trend, [tr for _, _, tr in post]
        )
        f.alerting, f.calm = True, 0
        return [
            Alert(
                f.name,
                ratio,
                ci,
                post[0][0],
                t,
                guess.cause,
                guess.candidates,
                guess.reason,
                len(post),
                f.cusum.value,
                f.cusum.h,
            )
        ]

    def _speculation(self, s: CanarySample) -> list[Alert | Recovery]:
        """The speculation_off rule over reliable canaries of a baseline that drafted:
        OFF_SAMPLES plain canaries in a row (one token a step, no draft the server reports)
        raise it, OFF_SAMPLES drafting ones end it."""
        b = self.baseline
        if b is None or not b.speculating or not s.reliable:
            return []
        # a canary the server says it drafted for is speculation on, whatever it committed
        plain = s.commit_len <= PLAIN_COMMIT and not s.drafted
        if plain != self.off_alerting:  # a canary against the current state: count it
            self._off.append(s)
        else:
            self._off.clear()
        if len(self._off) < OFF_SAMPLES:
            return []
        run = list(self._off)
        self._off.clear()
        self.off_alerting = not self.off_alerting
        if not self.off_alerting:
            self.factors["commit_len"].cusum.reset()
            return [Recovery("speculation_off", s.t)]
        ratio, ci = _ratio_ci(b.commit, [x.log_commit for x in run])
        g = SPECULATION_OFF
        n = float(len(run))
        return [
            Alert(
                "speculation_off",
                ratio,
                ci,
                run[0].t,
                s.t,
                g.cause,
                g.candidates,
                g.reason,
                len(run),
                n,
                float(OFF_SAMPLES),
            )
        ]
