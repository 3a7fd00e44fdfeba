"""Verification rules: greedy keeps the argmax path; sampled speculation reproduces the target's
token distribution exactly (chi-square on a small vocabulary, fixed seeds), and a deliberately
wrong rule fails the same test (so the test can fail)."""

from __future__ import annotations

import numpy as np
from scipy import stats

from specscope.engine.speculative.tree import build_ddtree, chain_tree
from specscope.engine.speculative.verify import (
    softmax,
    verify_chain_sampled,
    verify_greedy,
    verify_tree_sampled,
)

V = 4
N_SAMPLES = 12_000
P_MIN = 1e-4  # with fixed seeds the outcome is deterministic; a correct rule gives p ~ U(0, 1)

# A Markov "target" p(next | prev) and a deliberately different "draft" q(next | prev).
P = softmax(np.random.default_rng(1).normal(size=(V, V)) * 1.5, 1.0)
Q = softmax(np.random.default_rng(2).normal(size=(V, V)) * 1.5, 1.0)


def _exact_pairs(start: int, offset: int) -> np.ndarray:
    """Exact P(y_{offset+1}, y_{offset+2} | x0 = start) under the Markov target."""
    marg = np.linalg.matrix_power(P, offset + 1)[start] if offset else P[start]
    return (marg[:, None] * P).ravel()


def _ddtree_after(last: int):
    """DDTree (depth 3, budget 5) over the draft's top-2 marginals after token `last`."""
    topk = np.argsort(-Q[last])[None, :2].repeat(3, axis=0)
    logq = np.log(np.take_along_axis(np.tile(Q[last], (3, 1)), topk, axis=1))
    return build_ddtree(last, topk, logq, budget=5)


def _generate(rule: str, n_tokens: int, rng: np.random.Generator, k: int = 3) -> list[int]:
    out = [0]
    while len(out) - 1 < n_tokens:
        last = out[-1]
        if rule in ("chain_q", "wrong"):
            drafts, qs, prev = [], [], last
            for _ in range(k):
                x = int(rng.choice(V, p=Q[prev]))
                drafts.append(x)
                qs.append(Q[prev])
                prev = x
            p_rows = np.array([P[t] for t in [last, *drafts]])
            if rule == "wrong":  # accept every draft: the output follows q, not p
                committed = [*drafts, int(rng.choice(V, p=p_rows[-1]))]
            else:
                committed = verify_chain_sampled(drafts, p_rows, rng, np.array(qs)).committed
        elif rule == "chain_onehot":  # deterministic drafts (n-gram / argmax): q one-hot
            drafts, prev = [], last
            for _ in range(k):
                prev = int(np.argmax(Q[prev]))
                drafts.append(prev)
            p_rows = np.array([P[t] for t in [last, *drafts]])
            committed = verify_chain_sampled(drafts, p_rows, rng, None).committed
        else:  # tree: DDTree over the draft's marginals, target-only sampling walk
            tree = _ddtree_after(last)
            picks = [int(rng.choice(V, p=P[t])) for t in tree.tokens]  # one draw a node
            committed = verify_tree_sampled(tree, picks).committed
        out.extend(committed)
    return out[1 : n_tokens + 1]


def _pvalues(rule: str, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    samples = np.array([_generate(rule, 4, rng) for _ in range(N_SAMPLES)])
    pvals = []
    for offset in (0, 2):
        idx = samples[:, offset] * V + samples[:, offset + 1]
        observed = np.bincount(idx, minlength=V * V)
        expected = _exact_pairs(0, offset) * N_SAMPLES
        pvals.append(stats.chisquare(observed, expected).pvalue)
    return pvals[0], pvals[1]


def test_chain_rejection_sampling_with_sampled_drafts_follows_target():
    assert min(_pvalues("chain_q", 11)) > P_MIN


def test_chain_rejection_sampling_with_deterministic_drafts_follows_target():
    assert min(_pvalues("chain_onehot", 12)) > P_MIN


def test_tree_target_only_sampling_follows_target():
    assert min(_pvalues("tree", 13)) > P_MIN


def test_accepting_everything_is_detected():
    assert min(_pvalues("wrong", 14)) < P_MIN


def test_greedy_chain_accepts_longest_matching_prefix_plus_bonus():
    tree = chain_tree(5, [6, 7, 8])
    v = verify_greedy(tree, [6, 7, 3, 9])
    assert v.committed == [6, 7, 3] and v.accepted_drafts == 2
    assert v.accepted_per_position == [True, True, False]
    v = verify_greedy(tree, [6, 7, 8, 9])
    assert v.committed == [6, 7, 8, 9] and v.accepted_per_position == [True] * 3
    assert verify_greedy(tree, [1, 7, 8, 9]).committed == [1]


def _rowdraws_tree_samples(n: int, seed: int) -> np.ndarray:
    """(y1, y2) after x0 = 0 from the engine's path: DDTree over the draft's marginals, the
    target's draws made by RowDraws (torch, the request's generator) as the walk reads them."""
    import torch

    from specscope.engine.sampling import RowDraws, make_generator

    gen, log_p = make_generator(seed), torch.tensor(np.log(P), dtype=torch.float32)
    out = np.empty((n, 2), dtype=np.int64)
    for s in range(n):
        seq = [0]
        while len(seq) < 3:
            tree = _ddtree_after(seq[-1])
            draws = RowDraws(log_p[torch.as_tensor(tree.tokens)], 1.0, 1.0, gen)
            seq.extend(verify_tree_sampled(tree, draws).committed)
            assert len(draws.drawn) <= len(tree.tokens)
        out[s] = seq[1:3]
    return out


def test_tree_walk_over_row_draws_follows_target():
    """The engine's own draws (engine/sampling.RowDraws) keep the target's distribution."""
    samples = _rowdraws_tree_samples(6000, 15)
    observed = np.bincount(samples[:, 0] * V + samples[:, 1], minlength=V * V)
    assert stats.chisquare(observed, _exact_pairs(0, 0) * len(samples)).pvalue > P_MIN


def test_row_draws_on_the_cpu_draw_only_the_rows_read():
    import torch

    from specscope.engine.sampling import RowDraws, make_generator

    logits = torch.zeros(17, 8)
    logits[:, 3] = 50.0  # every row picks token 3
    draws = RowDraws(logits, 1.0, 1.0, make_generator(0))
    assert draws[4] == 3 and draws[4] == 3 and set(draws.drawn) == {4}
