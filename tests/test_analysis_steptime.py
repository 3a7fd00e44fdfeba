"""steptime: robust fit of step time against context and output position; the drift test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats

from specscope.analysis.fits import steptime as stm


def _requests(rng, prompts, gen, *, s0=0.012, a=7e-6, d=0.0, noise=0.05, commit=3):
    """Steps of requests at the given prompt lengths: s = s0 + a*context + d*pos, lognormal noise."""
    s_all, ctx_all, pos_all, rid_all = [], [], [], []
    for i, (p, n) in enumerate(zip(prompts, gen, strict=True)):
        pos = np.arange(0, n, commit, dtype=float)
        ctx = p + pos
        s = (s0 + a * ctx + d * pos) * rng.lognormal(-(noise**2) / 2, noise, size=pos.size)
        (
            s_all.append(s),
            ctx_all.append(ctx),
            pos_all.append(pos),
            rid_all.append(np.full(pos.size, i)),
        )
    return (np.concatenate(x) for x in (s_all, ctx_all, pos_all, rid_all))


def test_recovers_context_slope_and_drift_when_prompts_vary():
    rng = np.random.default_rng(0)
    s, ctx, pos, rid = _requests(
        rng, [512, 1024, 2048, 3072, 4096, 2701], [128] * 5 + [1500], d=6e-5
    )
    fit = stm.fit_step_time(s, ctx, pos, request_ids=rid)
    assert fit.identifiable
    assert fit.per_context_token == pytest.approx(7e-6, rel=0.1)
    assert fit.per_output_token == pytest.approx(6e-5, rel=0.1)
    dt = stm.drift_test(fit, span_tokens=1500, mean_step_s=float(s.mean()))
    assert dt.present and dt.z > 10
    assert dt.ci[0] < 6e-5 < dt.ci[1]


def test_no_drift_on_pure_noise():
    """Drift significance must be false when step time only depends on context (20 seeds)."""
    present = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        s, ctx, pos, rid = _requests(
            rng, [512, 2048, 4096, 2701], [128, 128, 128, 1500], noise=0.15
        )
        fit = stm.fit_step_time(s, ctx, pos, request_ids=rid)
        dt = stm.drift_test(fit, span_tokens=1500, mean_step_s=float(s.mean()))
        present += dt.present
    assert present == 0


def test_stalls_are_left_out_and_do_not_bias_the_drift_low():
    """Stalls (a GC pause, a fault) come per request, not per step, so they are densest in short
    requests, at low output positions: Huber alone still feels each one (bounded, not zero
    influence) and reads a negative drift where there is none. Left out, the slope is centred
    on the truth (20 seeds; three 0.25 s stalls in each short request)."""
    z_huber_only, z_kept = [], []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        s, ctx, pos, rid = _requests(
            rng, [256, 512, 1024, 2048, 512, 2701], [96, 96, 96, 96, 1500, 1500], noise=0.08
        )
        for r in range(4):
            s[rng.choice(np.flatnonzero(rid == r), 3, replace=False)] += 0.25
        fit = stm.fit_step_time(s, ctx, pos, request_ids=rid)
        assert 12 <= fit.stalls <= 14  # every stall, and at most a rare noise tail beside them
        assert fit.to_dict()["stalls_left_out"] == fit.stalls
        se = fit.se["per_output_token"]
        z_kept.append(fit.per_output_token / se)
        x = np.column_stack([np.ones_like(s), ctx / stm.KTOK, pos / stm.KTOK])
        start = np.linalg.lstsq(x, s, rcond=None)[0]  # Huber alone, as the fit's first pass
        scale = stats.median_abs_deviation(s - x @ start, scale="normal")
        huber = optimize.least_squares(
            lambda b, x=x, s=s: x @ b - s, start, loss="huber", f_scale=stm.HUBER_K * scale
        )
        z_huber_only.append(huber.x[2] / stm.KTOK / se)
    assert np.mean(z_huber_only) < -0.6
    assert abs(np.mean(z_kept)) < 0.6


def test_a_second_mode_of_step_times_is_structure_not_stalls():
    """A fifth of the steps take 25 ms longer (say, the ones that verified drafts while the rest
    drafted nothing): far beyond 6 robust sds of the main mode, but far too many to be stalls,
    so the fit keeps every step."""
    rng = np.random.default_rng(5)
    s, ctx, pos, rid = _requests(
        rng, [256, 512, 1024, 2048, 2701], [96, 96, 96, 96, 1500], noise=0.03
    )
    s = s + 0.025 * (rng.random(s.size) < 0.2)
    fit = stm.fit_step_time(s, ctx, pos, request_ids=rid)
    assert fit.stalls == 0 and fit.stall_above_s is None and fit.kept.all()


def test_one_prompt_length_is_confounded_and_says_so():
    rng = np.random.default_rng(1)
    s, ctx, pos, rid = _requests(rng, [2701], [1500], d=6e-5)
    fit = stm.fit_step_time(s, ctx, pos, request_ids=rid)
    assert not fit.identifiable and fit.per_output_token is None
    assert "confounded" in fit.reason
    assert stm.drift_test(fit, span_tokens=1500, mean_step_s=float(s.mean())) is None
    # the single slope carries context + drift together
    assert fit.per_context_token == pytest.approx(7e-6 + 6e-5, rel=0.1)


def test_robust_to_spikes():
    rng = np.random.default_rng(2)
    s, ctx, pos, rid = _requests(rng, [512, 1024, 2048, 4096], [400] * 4)
    spikes = rng.random(s.size) < 0.03
    s = s + spikes * 0.5  # 3% of steps stall for 500 ms (40x a step)
    fit = stm.fit_step_time(s, ctx, pos, request_ids=rid)
    assert fit.per_context_token == pytest.approx(7e-6, rel=0.15)
    dt = stm.drift_test(fit, span_tokens=400, mean_step_s=float(np.median(s)))
    assert not dt.present


def test_expected_excludes_drift_and_too_few_steps_gives_none():
    rng = np.random.default_rng(3)
    s, ctx, pos, rid = _requests(rng, [512, 4096], [600, 600], d=5e-5)
    fit = stm.fit_step_time(s, ctx, pos, request_ids=rid)
    e = fit.expected(np.array([1000.0]))
    assert e[0] == pytest.approx(fit.s0 + fit.per_context_token * 1000)
    assert stm.fit_step_time(s[:5], ctx[:5], pos[:5]) is None
    d = fit.to_dict()
    assert {"s0", "per_context_token", "r2", "context_output_separable"} <= set(d)
