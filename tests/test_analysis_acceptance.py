"""acceptance: the story's histogram, decay vs window cliff (change point), honeymoon, telemetry."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.analysis.fits import acceptance as acc
from specscope.telemetry.records import SpecRecord

# The story's `uniq -c` table: count, avg_accepted_drafts, avg_commit_len
STORY = [
    (67, 1, 2),
    (63, 2, 3),
    (40, 3, 4),
    (34, 0, 1),
    (20, 4, 5),
    (10, 5, 6),
    (2, 6, 7),
    (1, 1, 1),
]


def test_story_histogram_and_mean():
    commits = [c for n, _, c in STORY for _ in range(n)]
    h = acc.histogram(commits)
    assert h == {1: 35, 2: 67, 3: 63, 4: 40, 5: 20, 6: 10, 7: 2}
    assert acc.histogram_mean(h) == pytest.approx(692 / 237)  # ~2.92, "approximately 2.9"


def _sample(rng, prompts, gens, *, base=5.0, decay_to=None, decay_at=300, window=None, low=2.5):
    """Commit lengths around a mean that may step down with output position and/or context."""
    k, ctx, pos = [], [], []
    for p, g in zip(prompts, gens, strict=True):
        o = 0
        while o < g:
            m = base
            if decay_to is not None and o > decay_at:
                m = decay_to
            if window is not None and p + o > window:
                m = low if decay_to is None else min(m, low)
            c = int(np.clip(rng.poisson(m - 1) + 1, 1, 8))
            k.append(c), ctx.append(p + o), pos.append(o)
            o += c
    return np.array(k, float), np.array(ctx, float), np.array(pos, float)


SWEEP = [512, 512, 1024, 1024, 2048, 2048, 3072, 3072, 4096, 4096, 2701]
GENS = [128] * 10 + [1500]


def test_change_point_recovers_the_window():
    rng = np.random.default_rng(0)
    k, ctx, pos = _sample(rng, SWEEP, GENS, window=2048)
    fit = acc.fit_acceptance(k, ctx, pos)
    assert fit.window_present and not fit.decay_present
    lo, hi = fit.window.at_range
    assert lo <= 2048 <= hi <= 2060  # between the last context seen below and the first above
    assert fit.window.before == pytest.approx(5.0, rel=0.1)
    assert fit.window.after == pytest.approx(2.5, rel=0.15)


def test_window_between_two_sweep_points_inside_a_generation():
    rng = np.random.default_rng(1)
    k, ctx, pos = _sample(rng, SWEEP, GENS, window=3500)
    fit = acc.fit_acceptance(k, ctx, pos)
    assert fit.window_present
    lo, hi = fit.window.at_range
    assert lo <= 3500 + 10 and hi >= 3500 - 10
    assert hi - lo < 600


def _copy_then_own_text(rng, prompts, *, window, gen_prompt=2700, gens=(1500, 1500)):
    """Short sweep requests around a window (5 tokens a step below it, 1 above) and long
    generations that start above it at 1 a step and later repeat their own text (4 a step):
    the long generations' own change outweighs the sweep in a search over every step."""
    k, ctx, pos = _sample(rng, prompts, [64] * len(prompts), window=window, low=1.0)
    for g in gens:
        gk, gc, gp = _sample(rng, [gen_prompt], [g], base=1.0)
        late = gp > 400
        gk[late] = np.clip(rng.poisson(3.0, late.sum()) + 1, 1, 8)
        k, ctx, pos = np.r_[k, gk], np.r_[ctx, gc], np.r_[pos, gp]
    return k, ctx, pos


def test_a_window_is_found_among_early_steps_when_long_generations_change_on_their_own():
    rng = np.random.default_rng(5)
    k, ctx, pos = _copy_then_own_text(rng, [256, 512, 768, 1280, 1536, 2048, 2700], window=1024)
    fit = acc.fit_acceptance(k, ctx, pos)
    assert fit.window_present
    lo, hi = fit.window.at_range
    assert lo <= 1024 <= hi and hi - lo <= 512  # between the sweep's requests around it
    assert fit.window.before == pytest.approx(5.0, rel=0.15)


def test_the_early_look_finds_no_window_where_short_requests_agree():
    rng = np.random.default_rng(6)
    k, ctx, pos = _copy_then_own_text(rng, [256, 512, 768, 1280, 1536, 2048], window=None)
    k[pos < 64] = np.clip(rng.poisson(0.2, int((pos < 64).sum())) + 1, 1, 8)  # all ~1.2
    fit = acc.fit_acceptance(k, ctx, pos)
    assert not fit.window_present


def test_decay_is_not_mistaken_for_a_window():
    rng = np.random.default_rng(2)
    k, ctx, pos = _sample(rng, SWEEP, GENS, decay_to=2.5, decay_at=300)
    fit = acc.fit_acceptance(k, ctx, pos)
    assert fit.decay_present and not fit.window_present
    assert fit.decay.relative_drop == pytest.approx(0.5, abs=0.1)


def test_steady_acceptance_has_neither():
    for seed in range(10):
        rng = np.random.default_rng(seed)
        k, ctx, pos = _sample(rng, SWEEP, GENS)
        fit = acc.fit_acceptance(k, ctx, pos)
        assert not fit.decay_present and not fit.window_present, seed


def test_one_prompt_length_prefers_decay_and_notes_it():
    rng = np.random.default_rng(3)
    k, ctx, pos = _sample(rng, [2701], [3000], window=3300)
    fit = acc.fit_acceptance(k, ctx, pos)
    assert not fit.window_present
    assert fit.decay_present
    assert any("one prompt length" in n for n in fit.notes)


def test_honeymoon_size():
    # 40 steps of 5 tokens (200 tokens), then 260 steps of 2.5 on average
    k = np.array([5] * 40 + [2, 3] * 130, float)
    pos = np.concatenate([[0], np.cumsum(k)[:-1]])
    s = np.full(k.size, 0.05)
    hm = acc.honeymoon(k, s, pos, window_tokens=200)
    assert hm.window_commit_len == pytest.approx(5.0)
    assert hm.long_commit_len == pytest.approx(k.mean())
    assert hm.commit_overstatement == pytest.approx(5.0 / k.mean() - 1)
    assert hm.tps_overstatement == pytest.approx(hm.commit_overstatement)  # same step time


def test_profile_by_position_windows():
    k = np.array([5] * 50 + [2] * 50, float)
    pos = np.arange(100, dtype=float) * 10
    starts, means, w = acc.profile_by_position(pos, k, window=250)
    assert w == 250 and starts.tolist() == [0, 250, 500, 750]
    assert means[0] == 5 and means[-1] == 2


def test_per_step_telemetry_wins_and_keeps_one_rank():
    recs = []
    for i, (n, a, c) in enumerate(STORY):
        for j in range(n):
            for rank in ("TP0", "TP1"):
                recs.append(
                    SpecRecord(
                        format="ddtree",
                        rank=rank,
                        request_id="r1",
                        step=i * 100 + j,
                        commit_len=c,
                        accepted_drafts=a,
                        n_steps=1,
                        scope="step",
                    )
                )
    recs.append(SpecRecord(format="sglang_decode", commit_len=9.0, n_steps=40, scope="interval"))
    sa = acc.from_telemetry(recs)
    assert sa.per_step and sa.n_steps == 237
    assert sa.histogram[2] == 67
    assert sa.mean_commit_len == pytest.approx(692 / 237)
    assert "TP0" in sa.source and len(sa.by_request["r1"]) == 237


def test_summaries_are_weighted_by_steps_and_lifetime_skipped():
    recs = [
        SpecRecord(format="sglang_decode", commit_len=4.0, n_steps=300, scope="interval"),
        SpecRecord(format="vllm_spec", commit_len=2.0, n_steps=100, scope="interval"),
        SpecRecord(format="server_info", commit_len=7.0, scope="lifetime"),
    ]
    sa = acc.from_telemetry(recs)
    assert not sa.per_step
    assert sa.mean_commit_len == pytest.approx((4 * 300 + 2 * 100) / 400)
    assert (
        acc.from_telemetry([SpecRecord(format="server_info", commit_len=7.0, scope="lifetime")])
        is None
    )


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.builds(
            SpecRecord,
            format=st.sampled_from(
                ["ddtree", "sglang_decode", "vllm_spec", "prometheus", "server_info"]
            ),
            rank=st.sampled_from([None, "TP0", "TP1"]),
            request_id=st.sampled_from([None, "a", "b"]),
            step=st.one_of(st.none(), st.integers(-3, 50)),
            commit_len=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
            accepted_drafts=st.one_of(st.none(), st.floats(-5, 20)),
            n_steps=st.one_of(st.none(), st.integers(-2, 1000)),
            scope=st.sampled_from(["step", "interval", "lifetime", "run_delta"]),
        ),
        max_size=30,
    )
)
def test_from_telemetry_never_raises_and_stays_physical(recs):
    sa = acc.from_telemetry(recs)
    if sa is not None and sa.mean_commit_len is not None:
        assert 1 <= sa.mean_commit_len <= 1024
