"""The watch's detector on virtual time (analysis/watch): silent on stationary input over a
long run, an alert naming the right factor, cause and change point on a change, one alert per
episode, a recovery, bounded memory, and the CUSUM's threshold holding its stated run length."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specscope.analysis.watch.cusum import Cusum, arl0, threshold_for
from specscope.analysis.watch.detector import KEEP, Alert, Detector, DetectorConfig, Recovery
from specscope.analysis.watch.sample import (
    CanarySample,
    sample_from_steps,
    sample_from_trace,
    server_drafts,
)
from specscope.trace.model import Chunk, RequestSpec, RequestTrace, ServerSpecFields
from specscope.twin.scenario import load_scenario, simulate_request_steps

EVERY = 10.0


def synthetic(
    rng: np.random.Generator, t: float, commit: float = 4.8, step: float = 0.0165, **kw: float
) -> CanarySample:
    """A canary whose log commit length and log step time vary as real text makes them (sd
    0.08 and 0.05 between canaries)."""
    return CanarySample(
        t=t,
        commit_len=commit * math.exp(0.08 * rng.standard_normal()),
        step_s=step * math.exp(0.05 * rng.standard_normal()),
        steps=52,
        tokens=256,
        commit_trend=kw.get("commit_trend", 0.0) + 0.1 * rng.standard_normal(),
        step_trend=kw.get("step_trend", 0.05) + 0.02 * rng.standard_normal(),
    )


def twin_canary(name: str, t: float, seed: int) -> CanarySample:
    sc = load_scenario(name)
    steps = [(s.commit_len, s.step_s) for s in simulate_request_steps(sc, 512, 256, seed)]
    sample = sample_from_steps(t, steps)
    assert sample is not None
    return sample


def alerts(events: list[Alert | Recovery]) -> list[Alert]:
    return [e for e in events if isinstance(e, Alert)]


def test_no_alarm_over_a_long_stationary_run():
    """20,000 canaries (55 h at one per 10 s) of stationary content-varying input: the design
    rate is 0.1 false alarms per 24 h, so even one alarm here would be far off it."""
    rng = np.random.default_rng(40)
    det = Detector(t0=0.0)
    raised = []
    for i in range(1, 20_001):
        raised += alerts(det.observe(synthetic(rng, i * EVERY)))
    assert det.state == "watching"
    assert raised == []
    assert all(len(f.kept) <= KEEP for f in det.factors.values())  # bounded over days


def test_no_alarm_on_the_twin_healthy_over_six_hours():
    det = Detector(t0=0.0)
    raised = []
    for i in range(1, 6 * 360 + 1):
        raised += alerts(det.observe(twin_canary("healthy", i * EVERY, i)))
    assert raised == []


def test_the_story_alerts_step_time_with_its_cause_after_the_switch_only():
    """healthy -> seed-regression at 90 s (the story: 30 s after the warm-up): one alert, step_time, host work or KV layout (the
    drift grows along each generation; a canary cannot tell which: no cause named), its change point at the switch, its interval holding the ratio."""
    det = Detector(t0=0.0)
    raised: list[tuple[float, Alert]] = []
    for i in range(1, 61):
        t = i * EVERY
        name = "healthy" if t <= 90 else "seed-regression"
        raised += [(t, a) for a in alerts(det.observe(twin_canary(name, t, 1000 + i)))]
    assert len(raised) == 1
    t, a = raised[0]
    assert a.factor == "step_time" and a.cause is None
    assert set(a.candidates) == {"host_per_token", "kv_layout"}
    assert 90 < a.since <= t <= 90 + 60
    assert a.ci[0] < 1.49 < a.ci[1] or abs(a.ratio - 1.49) < 0.1
    assert a.ci[0] > 1.0


def test_a_commit_length_fall_names_commit_len_and_whether_it_is_positional():
    rng = np.random.default_rng(3)
    det = Detector(t0=0.0)
    out: list[Alert] = []
    for i in range(1, 200):
        t = i * EVERY
        later = t > 600
        s = synthetic(rng, t, commit=3.8 if later else 4.8, commit_trend=-0.3 if later else 0.0)
        out += alerts(det.observe(s))
    assert [a.factor for a in out] == ["commit_len"]
    assert out[0].cause is None and out[0].candidates[0] == "acceptance_position"
    assert out[0].ratio == pytest.approx(3.8 / 4.8, rel=0.08)
    assert out[0].since > 600


def test_an_even_step_time_rise_is_blamed_on_batching_not_the_kv_layout():
    rng = np.random.default_rng(5)
    det = Detector(t0=0.0)
    out: list[Alert] = []
    for i in range(1, 200):
        t = i * EVERY
        out += alerts(det.observe(synthetic(rng, t, step=0.0165 * (1.3 if t > 600 else 1.0))))
    assert [a.factor for a in out] == ["step_time"]
    assert out[0].cause is None and out[0].candidates[0] == "acceptance_concurrency"
    assert "kv_layout" not in out[0].candidates


def test_speculation_off_is_its_own_factor_and_recovers():
    rng = np.random.default_rng(7)
    det = Detector(t0=0.0)
    events: list[Alert | Recovery] = []
    for i in range(1, 120):
        t = i * EVERY
        off = 600 < t <= 900
        s = synthetic(rng, t)
        if off:
            s = CanarySample(t, 1.0, s.step_s * 0.7, 256, 256, 0.0, 0.05)
        events += det.observe(s)
    factors = [(type(e).__name__, e.factor) for e in events]
    assert ("Alert", "speculation_off") in factors
    assert ("Alert", "commit_len") not in factors  # implied by it, not a second alert
    assert ("Recovery", "speculation_off") in factors
    off = next(e for e in events if isinstance(e, Alert))
    assert off.cause is None and off.ratio < 0.3 and off.since > 600


def test_a_canary_the_server_drafted_for_is_not_speculation_off():
    """vLLM's n-gram peer, watched live: a canary whose prompt held few n-grams committed 1.03
    tokens a step while the server proposed 20 draft tokens for it (in 5 steps). Two such
    canaries in a row, read as plain by their commit length alone, would raise speculation_off
    on a server still drafting; the server's per-request draft count says otherwise. The same
    canaries without a draft count (a server that stopped drafting reports none) still raise
    it."""
    rng = np.random.default_rng(5)

    def off_alerts(drafted: int | None) -> list[Alert]:
        det = Detector(t0=0.0)
        raised: list[Alert] = []
        for i in range(1, 40):
            s = synthetic(rng, i * EVERY, commit=2.0)
            if i > 30:  # 9 canaries in a row at ~one token a step
                s = CanarySample(s.t, 1.02, s.step_s, 63, 64, 0.0, 0.05, drafted=drafted)
            raised += [a for a in alerts(det.observe(s)) if a.factor == "speculation_off"]
        assert det.baseline is not None and det.baseline.speculating
        return raised

    assert off_alerts(drafted=20) == []
    assert len(off_alerts(drafted=None)) == 1
    assert len(off_alerts(drafted=0)) == 1  # the server says it drafted nothing


def test_the_server_draft_count_of_a_canary():
    assert server_drafts(None) is None
    assert server_drafts(ServerSpecFields(source="vllm.metrics")) is None
    assert server_drafts(ServerSpecFields(proposed_drafts=5, source="vllm.metrics")) == 5
    assert server_drafts(ServerSpecFields(per_step_drafted=[4, 0, 4], source="sglang")) == 8


def test_a_canary_sample_carries_the_server_draft_count():
    """The live path: a streamed canary (one token a chunk, 20 ms apart) with vLLM's
    per-request figures gives a sample that says how many drafts the server proposed."""
    chunks = [Chunk(t_ns=i * 20_000_000, n_tokens=1) for i in range(1, 40)]
    spec = RequestSpec(prompt="x", max_tokens=39, tag="watch:canary")
    trace = RequestTrace(spec=spec, t_send_ns=0, chunks=chunks, t_end_ns=40 * 20_000_000)
    plain = sample_from_trace(trace, 1.0)
    assert plain is not None and plain.drafted is None and plain.commit_len == 1.0
    trace.server_spec = ServerSpecFields(
        proposed_drafts=5, accepted_drafts=0, source="vllm.metrics"
    )
    drafted = sample_from_trace(trace, 1.0)
    assert drafted is not None and drafted.drafted == 5


def test_one_wild_canary_never_alarms_alone():
    rng = np.random.default_rng(11)
    det = Detector(t0=0.0)
    out: list[Alert] = []
    for i in range(1, 100):
        s = synthetic(rng, i * EVERY)
        if i == 50:
            s = CanarySample(s.t, s.commit_len, s.step_s * 20, s.steps, s.tokens, 0.0, 0.05)
        out += alerts(det.observe(s))
    assert out == []


def test_a_persisting_change_alerts_once_then_recovers_when_it_ends():
    rng = np.random.default_rng(13)
    det = Detector(t0=0.0)
    events: list[Alert | Recovery] = []
    for i in range(1, 400):
        t = i * EVERY
        slow = 600 < t <= 2000
        events += det.observe(synthetic(rng, t, step=0.0165 * (1.5 if slow else 1.0)))
    kinds = [(type(e).__name__, e.factor) for e in events]
    assert kinds == [("Alert", "step_time"), ("Recovery", "step_time")]


def test_the_warm_up_waits_for_enough_canaries():
    rng = np.random.default_rng(17)
    det = Detector(DetectorConfig(warmup_s=60), t0=0.0)
    for i in range(1, 4):  # three canaries over 90 s: too few for a baseline
        det.observe(synthetic(rng, i * 30.0))
    assert det.state == "warmup"
    for i in range(4, 7):
        det.observe(synthetic(rng, i * 30.0))
    assert det.state == "watching"


@pytest.mark.parametrize("k", [0.25, 0.5])
def test_the_threshold_holds_its_stated_run_length(k):
    """Monte Carlo: a CUSUM at threshold_for(k, 400) on N(0, 1) runs about 400 observations
    before a false alarm (Siegmund's approximation is within ~15% here), and never fewer than
    0.75 of it."""
    h = threshold_for(k, 400.0)
    assert arl0(k, h) == pytest.approx(400.0, rel=0.01) or h == 4.5
    rng = np.random.default_rng(int(k * 100))
    lengths = []
    for _ in range(300):
        c = Cusum(k, h)
        n = 0
        while not c.update(float(rng.standard_normal())):
            n += 1
        lengths.append(n + 1)
    assert float(np.mean(lengths)) > 0.75 * arl0(k, h)
