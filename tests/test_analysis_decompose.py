"""decompose: tps = L / s exactly, the acceptance x step-time split, bootstrap CIs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.analysis.headline import decompose as dec
from specscope.analysis.headline.uncertainty import unit_rows


def _steps(rng: np.random.Generator, n: int, mean_k: float, mean_s: float):
    k = rng.integers(1, int(2 * mean_k), size=n)
    s = rng.lognormal(np.log(mean_s), 0.2, size=n)
    return k, s


def test_tps_is_commit_length_over_step_time_exactly():
    rng = np.random.default_rng(1)
    k, s = _steps(rng, 500, 3, 0.05)
    d = dec.decompose(k, s)
    assert d.decode_tps == pytest.approx(k.sum() / s.sum(), rel=1e-12)
    assert d.decode_tps == pytest.approx(d.mean_commit_len / d.mean_step_s, rel=1e-12)
    # token-weighted, not the mean of per-step rates
    assert d.decode_tps != pytest.approx(float(np.mean(k / s)), rel=1e-3)


@settings(max_examples=60, deadline=None)
@given(
    kb=st.lists(st.integers(1, 8), min_size=1, max_size=50),
    ko=st.lists(st.integers(1, 8), min_size=1, max_size=50),
    sb=st.floats(1e-4, 1.0),
    so=st.floats(1e-4, 1.0),
)
def test_split_multiplies_to_the_tps_ratio(kb, ko, sb, so):
    b = dec.decompose(kb, [sb] * len(kb))
    o = dec.decompose(ko, [so] * len(ko))
    sp = dec.split(b, o)
    assert sp.acceptance_factor * sp.step_time_factor == pytest.approx(sp.tps_ratio, rel=1e-12)
    assert sp.tps_ratio == pytest.approx(b.decode_tps / o.decode_tps, rel=1e-9)


def test_split_recovers_known_factors():
    # baseline 5 tokens / 40 ms; observed 2.5 tokens / 80 ms: 2x acceptance, 2x step time
    b = dec.decompose([5] * 100, [0.04] * 100)
    o = dec.decompose([2, 3] * 50, [0.08] * 100)
    sp = dec.split(b, o)
    assert sp.acceptance_factor == pytest.approx(2.0)
    assert sp.step_time_factor == pytest.approx(2.0)
    assert sp.tps_ratio == pytest.approx(4.0)


def test_split_of_empty_side_is_none():
    assert dec.split(dec.decompose([], []), dec.decompose([1], [0.1])) is None


def test_units_switch_from_requests_to_blocks():
    rng = np.random.default_rng(2)
    k, s = _steps(rng, 400, 3, 0.05)
    few = np.repeat(np.arange(2), 200)
    rows, unit = unit_rows(k, s, few)
    assert unit == "block" and rows.shape[0] > 2
    many = np.repeat(np.arange(10), 40)
    rows, unit = unit_rows(k, s, many)
    assert unit == "request" and rows.shape == (10, 3)
    # either way the totals are preserved
    assert rows.sum(axis=0) == pytest.approx([k.sum(), 400, s.sum()])


def test_bootstrap_ci_brackets_the_point_and_is_seeded():
    rng = np.random.default_rng(3)
    kb, sb = _steps(rng, 600, 5, 0.04)
    ko, so = _steps(rng, 600, 3, 0.08)
    rb, _ = unit_rows(kb, sb, np.zeros(600))
    ro, unit = unit_rows(ko, so, np.zeros(600))
    ci = dec.split_ci(rb, ro, unit=unit, resamples=400, seed=5)
    for name in ("tps_ratio", "acceptance_factor", "step_time_factor"):
        lo, hi = getattr(ci, name)
        assert lo < getattr(ci.point, name) < hi
    again = dec.split_ci(rb, ro, unit=unit, resamples=400, seed=5)
    assert again.tps_ratio == ci.tps_ratio
    # the intervals are narrow relative to a 3x gap but not degenerate
    assert 0 < ci.tps_ratio[1] - ci.tps_ratio[0] < 0.5 * ci.point.tps_ratio
