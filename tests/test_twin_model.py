"""The twin's scenario model: loading, the pure simulation functions, and the shipped stories."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.twin.scenario import (
    ScenarioError,
    acceptance_multiplier,
    accepted_drafts,
    expected_commit_length,
    expected_step_s,
    load_scenario,
    prefill_time,
    scenario_names,
    simulate_request,
    simulate_request_steps,
    step_time,
)

SHIPPED = [
    "batch-headroom",
    "batch-verify-cost",
    "coalescing",
    "context-verify-cost",
    "draft-window",
    "expensive-tree",
    "healthy",
    "seed-regression",
    "shared-drafter",
    "speculation-overhead",
]


def _run(sc, prompt: int, n: int, seeds=range(10)) -> tuple[float, float]:
    """(mean commit length, decode seconds) averaged over seeds, virtual time."""
    commits, secs = [], []
    for s in seeds:
        steps = list(simulate_request(sc, prompt, n, s))
        commits.append(sum(k for k, _ in steps) / len(steps))
        secs.append(sum(t for _, t in steps))
    return float(np.mean(commits)), float(np.mean(secs))


def test_shipped_scenarios_load_and_document_every_key() -> None:
    assert scenario_names() == SHIPPED
    keys = [
        "s0",
        "per_context_token",
        "per_verified_token",
        "per_batch_request",
        "drift_per_output_token",
        "noise_sigma",
        "depth_probs",
        "decay_per_output_token",
        "window",
        "window_penalty",
        "replay_histogram",
        "stream_interval",
        "per_token_events",
        "disconnect_prob",
        "error_5xx_prob",
        "stall_s",
        "time_scale",
    ]
    for name in SHIPPED:
        sc = load_scenario(name)
        assert sc.name == name
        text = (Path(__file__).parents[1] / "scenarios" / f"{name}.toml").read_text()
        for key in keys:
            assert f"{key}" in text.split("\nname =")[0], f"{name}.toml does not document {key}"


def test_seed_regression_reproduces_the_story() -> None:
    sc = load_scenario("seed-regression")
    steps = [list(simulate_request_steps(sc, 2701, 1500, s)) for s in range(8)]
    early = np.mean([np.mean([x.commit_len for x in run[:30]]) for run in steps])
    mean_commit = np.mean([1500 / len(run) for run in steps])
    assert 4.6 <= early <= 5.6  # ~5 tokens/step early
    assert 2.7 <= mean_commit <= 3.1  # ~2.9 over the whole generation
    decode_s = np.mean([sum(x.step_s for x in run) for run in steps])
    e2e_tps = 1500 / (decode_s + prefill_time(sc, 2701))
    assert 29 <= e2e_tps <= 37  # "near 33 tok/s"
    # Two-point over a ~200-token window (max_tokens 56 and 256) reads above 100 tok/s.
    _, t1 = _run(sc, 2701, 56)
    _, t2 = _run(sc, 2701, 256)
    assert 200 / (t2 - t1) > 100
    # Step time grows with output position beyond what the context explains.
    late = [x for run in steps for x in run if x.output_pos > 1200]
    first = [x for run in steps for x in run if x.output_pos < 100]
    assert np.mean([x.step_s for x in late]) > 2.5 * np.mean([x.step_s for x in first])


def test_speculation_overhead_baseline_is_faster_without_speculation() -> None:
    spec = load_scenario("speculation-overhead")
    base = load_scenario("speculation-overhead:baseline")
    assert spec.acceptance.num_draft_tokens > 0 and base.acceptance.num_draft_tokens == 0
    spec_l, spec_t = _run(spec, 512, 400)
    base_l, base_t = _run(base, 512, 400)
    assert base_l == 1.0 and spec_l > 1.2
    assert 400 / base_t > 400 / spec_t  # speculation is slower here


def test_draft_window_cliff() -> None:
    sc = load_scenario("draft-window")
    assert acceptance_multiplier(sc, 0, 2048) == 1.0
    assert acceptance_multiplier(sc, 0, 2049) == pytest.approx(0.55)
    inside, _ = _run(sc, 1000, 400)
    outside, _ = _run(sc, 3000, 400)
    assert outside < 0.7 * inside


def test_chain_sampling_matches_expected_commit_length() -> None:
    sc = load_scenario("healthy")
    rng = np.random.default_rng(3)
    draws = [accepted_drafts(sc, 0, 100, rng) + 1 for _ in range(20000)]
    assert np.mean(draws) == pytest.approx(expected_commit_length(sc, 0, 100), rel=0.02)
    assert max(draws) <= sc.acceptance.max_drafts + 1


def test_replay_histogram_is_sampled_by_weight(tmp_path: Path) -> None:
    f = tmp_path / "replay.toml"
    f.write_text("[acceptance]\nreplay_histogram = [34, 67, 63, 40, 20, 10, 2]\n")
    sc = load_scenario(f)
    assert sc.acceptance.num_draft_tokens == 7
    rng = np.random.default_rng(0)
    counts = np.bincount([accepted_drafts(sc, 0, 10, rng) for _ in range(23600)], minlength=7)
    weights = np.array([34, 67, 63, 40, 20, 10, 2]) / 236
    assert np.allclose(counts / counts.sum(), weights, atol=0.01)


def test_noise_is_mean_preserving_and_time_scale_multiplies() -> None:
    sc = load_scenario("seed-regression")
    rng = np.random.default_rng(1)
    mean = expected_step_s(sc, 3000, 8, 1, 500)
    samples = [step_time(sc, 3000, 8, 1, 500, rng) for _ in range(20000)]
    assert np.mean(samples) == pytest.approx(mean, rel=0.01)
    assert expected_step_s(sc.scaled(0.1), 3000, 8, 1, 500) == pytest.approx(mean * 0.1)
    assert prefill_time(sc.scaled(0.5), 1000) == pytest.approx(prefill_time(sc, 1000) * 0.5)


def test_simulation_is_deterministic_per_seed() -> None:
    sc = load_scenario("seed-regression")
    a = list(simulate_request(sc, 100, 300, seed=5))
    b = list(simulate_request(sc, 100, 300, seed=5))
    c = list(simulate_request(sc, 100, 300, seed=6))
    assert a == b and a != c
    assert sum(k for k, _ in a) == 300  # the last step is cut to the tokens left


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("[acceptance]\ndepth_prob = [0.5]\n", "key acceptance.depth_prob"),
        ("[step]\ns0 = -1\n", "key step.s0"),
        ("[acceptance]\ndepth_probs = [1.5]\n", "acceptance"),
        ("[step\n", "not valid TOML"),
        ("time_scale = 0\n", "key time_scale"),
    ],
)
def test_bad_scenarios_name_file_and_key(tmp_path: Path, body: str, needle: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(body)
    with pytest.raises(ScenarioError) as err:
        load_scenario(f)
    assert str(f) in str(err.value) and needle in str(err.value)


def test_unknown_scenario_and_variant() -> None:
    with pytest.raises(ScenarioError, match="no such scenario"):
        load_scenario("no-such-scenario")
    with pytest.raises(ScenarioError, match="no \\[baseline\\] table"):
        load_scenario("healthy:baseline")


@settings(max_examples=200, deadline=None)
@given(
    context=st.integers(0, 100_000),
    verified=st.integers(0, 64),
    batch=st.integers(1, 512),
    pos=st.integers(0, 100_000),
    seed=st.integers(0, 2**32 - 1),
    name=st.sampled_from(SHIPPED),
)
def test_simulated_numbers_stay_in_range(context, verified, batch, pos, seed, name) -> None:
    sc = load_scenario(name)
    rng = np.random.default_rng(seed)
    s = step_time(sc, context, verified, batch, pos, rng)
    assert s >= 0 and math.isfinite(s)
    k = accepted_drafts(sc, pos, context, rng)
    assert 0 <= k <= sc.acceptance.max_drafts


def _noisy(**tables):
    sc = load_scenario("healthy")
    return sc.model_copy(update={k: getattr(sc, k).model_copy(update=v) for k, v in tables.items()})


def test_realistic_noise_options_are_off_by_default_and_change_nothing():
    sc = load_scenario("healthy")
    assert sc.acceptance.request_sigma == sc.acceptance.stretch_sigma == 0.0
    assert sc.step.noise_rho == 0.0 and sc.faults.stall_prob == 0.0
    # explicit zeros draw exactly what the defaults draw
    same = _noisy(acceptance={"request_sigma": 0.0}, step={"noise_rho": 0.0})
    assert list(simulate_request(sc, 512, 200, seed=3)) == list(simulate_request(same, 512, 200, 3))


def test_content_dependent_acceptance_varies_between_requests():
    def request_means(sc):
        return [np.mean([k for k, _ in simulate_request(sc, 512, 400, seed=s)]) for s in range(30)]

    plain = np.std(request_means(load_scenario("healthy")))
    noisy = np.std(request_means(_noisy(acceptance={"request_sigma": 0.6})))
    assert noisy > 2 * plain


def test_correlated_step_noise_and_stalls():
    sc = _noisy(step={"noise_sigma": 0.2, "noise_rho": 0.8})
    logs = np.log([s for _, s in simulate_request(sc, 512, 2000, seed=1)])
    r = logs - logs.mean()
    assert float(r[1:] @ r[:-1] / (r @ r)) > 0.5
    stalled = _noisy(faults={"stall_prob": 1.0, "stall_s": 1.0})
    steps = [s for _, s in simulate_request(stalled, 512, 300, seed=2)]
    assert sum(s > 0.9 for s in steps) == 1
