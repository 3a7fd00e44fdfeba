"""engine/sampling.py: the batched draw samples each row from its own distribution (temperature,
top-p), a row's token does not depend on the rows beside it, and a seed repeats its tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from specscope.engine.sampling import distribution, make_generator, probabilities, sample_rows

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -30.0])


def _draws(logits: torch.Tensor, temperature: float, top_p: float, n: int) -> np.ndarray:
    """n draws of one row, each from its own seed, counted per token."""
    rows = logits.expand(n, -1)
    gens = [make_generator(seed) for seed in range(n)]
    picks = sample_rows(rows, [temperature] * n, [top_p] * n, gens)
    return np.bincount(picks, minlength=logits.numel())


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7])
def test_draws_follow_the_tempered_distribution(temperature):
    n = 20_000
    counts = _draws(LOGITS, temperature, 1.0, n)
    expected = torch.softmax(LOGITS / temperature, -1).double().numpy() * n
    live = expected > 5  # the -30 logit is never expected (nor drawn, below)
    chi2 = stats.chisquare(counts[live], expected[live] * counts[live].sum() / expected[live].sum())
    assert chi2.pvalue > 1e-4, (counts, expected)
    assert counts[~live].sum() <= 1


def test_top_p_keeps_the_smallest_prefix_and_renormalises():
    probs = torch.softmax(LOGITS, -1)
    p0, p1 = float(probs[0]), float(probs[1])
    kept = distribution(LOGITS, 1.0, p0 + p1 / 2)  # needs the top two tokens
    assert torch.count_nonzero(kept) == 2
    assert float(kept[0]) == pytest.approx(p0 / (p0 + p1), rel=1e-5)
    counts = _draws(LOGITS, 1.0, p0 + p1 / 2, 5_000)
    assert counts[2:].sum() == 0 and counts[1] > 0
    # the top token alone where its own mass reaches top_p
    assert _draws(LOGITS, 1.0, p0 / 2, 200)[0] == 200


def test_per_row_parameters_and_batch_independence():
    """A row sampled beside others gets the token it gets alone (same seed), each row with
    its own temperature and top_p."""
    torch.manual_seed(0)
    logits = torch.randn(6, 50) * 3
    temps, tops = [0.3, 1.0, 1.5, 0.8, 1.0, 2.0], [1.0, 0.9, 1.0, 0.5, 0.99, 1.0]
    for seed in range(20):
        together = sample_rows(logits, temps, tops, [make_generator(seed + i) for i in range(6)])
        alone = [
            sample_rows(logits[i : i + 1], [temps[i]], [tops[i]], [make_generator(seed + i)])[0]
            for i in range(6)
        ]
        assert together == alone
    assert sample_rows(logits[:0], [], [], []) == []
    # each parameter on its own: one temperature for all rows, a top_p per row
    mixed = distribution(logits, 1.0, tops)
    for i, p in enumerate(tops):
        torch.testing.assert_close(mixed[i], distribution(logits[i], 1.0, p))


def test_a_seed_repeats_its_tokens_and_another_differs():
    logits = torch.randn(4, 100)
    draw = [sample_rows(logits, [1.0] * 4, [1.0] * 4, [make_generator(7)] * 4) for _ in range(2)]
    assert draw[0] == draw[1]
    others = {
        tuple(sample_rows(logits, [1.0] * 4, [1.0] * 4, [make_generator(s)] * 4))
        for s in range(8, 14)
    }
    assert len(others) > 1


def test_probabilities_are_the_host_copy_of_the_distribution():
    logits = torch.randn(3, 40)
    got = probabilities(logits, 0.7, 0.8)
    assert got.device.type == "cpu" and got.dtype == torch.float32
    torch.testing.assert_close(got, distribution(logits, 0.7, 0.8))
    torch.testing.assert_close(got.sum(-1), torch.ones(3))
