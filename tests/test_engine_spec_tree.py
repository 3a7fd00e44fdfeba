"""DDTree construction returns exactly the B most probable prefixes (checked against brute-force
enumeration), and the flat tree's mask / positions / walk mean what verification needs."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.engine.speculative.tree import build_ddtree, chain_tree, trie_tree


def _brute_force_best(logp: np.ndarray, budget: int) -> list[float]:
    """Log-probs of every prefix (length 1..L, tokens = ranks per depth), best `budget` of them."""
    depth, k = logp.shape
    scores = []
    for length in range(1, depth + 1):
        for ranks in itertools.product(range(k), repeat=length):
            scores.append(sum(logp[d, r] for d, r in enumerate(ranks)))
    return sorted(scores, reverse=True)[:budget]


@st.composite
def _tables(draw):
    depth = draw(st.integers(1, 4))
    k = draw(st.integers(1, 4))
    raw = draw(st.lists(st.floats(0.01, 1.0), min_size=depth * k, max_size=depth * k))
    probs = np.array(raw).reshape(depth, k)
    probs = probs / probs.sum(axis=1, keepdims=True) * draw(st.floats(0.3, 1.0))  # top-K mass < 1
    probs = -np.sort(-probs, axis=1)
    budget = draw(st.integers(1, 40))
    return np.log(probs), budget


@settings(max_examples=150, deadline=None)
@given(_tables())
def test_ddtree_returns_the_budget_most_probable_prefixes(table):
    logp, budget = table
    depth, k = logp.shape
    tokens = (
        np.arange(depth * k).reshape(depth, k) + 100
    )  # distinct ids: a node's token names its rank
    tree = build_ddtree(7, tokens, logp, budget)
    expected = _brute_force_best(logp, budget)
    assert tree.num_nodes == len(expected)
    np.testing.assert_allclose(
        sorted(tree.logprobs[1:], reverse=True), expected, rtol=1e-9, atol=1e-12
    )
    # Each node's stored log-prob is really the sum along its path, and parents come first.
    for i in range(1, len(tree.tokens)):
        p = tree.parents[i]
        assert 0 <= p < i
        assert tree.depths[i] == tree.depths[p] + 1
        d, r = divmod(int(tree.tokens[i]) - 100, k)
        assert d == tree.depths[i] - 1
        assert np.isclose(tree.logprobs[i], tree.logprobs[p] + logp[d, r])
    # Prefix-closed with no duplicate (parent, token) edges.
    edges = {(int(tree.parents[i]), int(tree.tokens[i])) for i in range(1, len(tree.tokens))}
    assert len(edges) == tree.num_nodes


def test_mask_is_ancestor_only_and_positions_follow_depth():
    #        0(root)
    #       /   \
    #      1     2          depth 1 (siblings share a position)
    #      |
    #      3                depth 2
    logp = np.log(np.array([[0.6, 0.3], [0.9, 0.05]]))
    tree = build_ddtree(5, np.array([[10, 11], [20, 21]]), logp, 3)
    assert tree.tokens.tolist() == [5, 10, 20, 11]  # pop order: 0.6, 0.54, 0.3
    assert tree.parents.tolist() == [-1, 0, 1, 0]
    assert tree.positions(40).tolist() == [40, 41, 42, 41]
    mask = tree.attention_mask()
    assert mask.tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [True, True, True, False],
        [True, False, False, True],
    ]


def test_walk_follows_target_choice_and_returns_bonus():
    tree = build_ddtree(5, np.array([[10, 11], [20, 21]]), np.log([[0.6, 0.3], [0.9, 0.05]]), 3)
    # Target picks 11 after the root: sibling branch accepted, then 99 is the bonus.
    path, bonus = tree.walk({0: 11, 1: 20, 2: 1, 3: 99})
    assert (path, bonus) == ([0, 3], 99)
    path, bonus = tree.walk({0: 10, 1: 20, 2: 42, 3: 0})
    assert (path, bonus, tree.path_tokens(path)) == ([0, 1, 2], 42, [10, 20])
    path, bonus = tree.walk({0: 12, 1: 0, 2: 0, 3: 0})
    assert (path, bonus) == ([0], 12)


def test_chain_and_trie_shapes():
    chain = chain_tree(1, [2, 3, 4])
    assert chain.parents.tolist() == [-1, 0, 1, 2]
    assert np.array_equal(chain.attention_mask(), np.tril(np.ones((4, 4), dtype=bool)))
    trie = trie_tree(1, [[2, 3, 4], [2, 5], [6]], budget=10)
    assert trie.tokens.tolist() == [1, 2, 3, 4, 5, 6]
    assert trie.parents.tolist() == [-1, 0, 1, 2, 1, 0]
    assert trie_tree(1, [[2, 3, 4], [6]], budget=2).tokens.tolist() == [1, 2, 3]


def test_empty_inputs_give_root_only_tree():
    tree = build_ddtree(3, np.zeros((0, 0), dtype=np.int64), np.zeros((0, 0)), 8)
    assert tree.tokens.tolist() == [3] and tree.walk([9]) == ([0], 9)
