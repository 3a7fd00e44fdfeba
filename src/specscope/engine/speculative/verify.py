"""Verification rules: which drafted tokens to keep, given the target's distributions.

Greedy (T = 0): keep the longest path whose every token equals the target's argmax at its
parent; the bonus is the argmax after the last kept token. Output equals plain greedy decoding.

Sampling (T > 0), chain: the standard speculative-sampling rule (Leviathan et al. / Chen et al.):
accept draft x_d with probability min(1, p_d(x_d) / q_d(x_d)); at the first rejection sample from
norm(max(0, p_d - q_d)); if all k are accepted, sample the bonus from p_{k+1}. Every emitted
token is then distributed exactly as the target would sample it. Deterministic drafts (n-gram,
argmax) have q one-hot, so the rule becomes "accept x with prob p(x), else sample p without x".

Sampling, tree: candidates are deterministic top-K tokens, so recursive rejection over a node's
children (q one-hot each) accepts with total probability p(c1) + p(c2) + ... — the same as
sampling y ~ p at the node and following the child equal to y ("target-only sampling", the
DDTree reference). We do the latter, the samples drawn on the logits' device at the nodes the
walk reaches (all at once on CUDA): lossless for any tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specscope.engine.speculative.tree import DraftTree, Picks


@dataclass
class Verdict:
    path: list[int]  # accepted node indices, root first (chain: 0..a)
    committed: list[int]  # accepted draft tokens + the bonus token
    accepted_per_position: list[bool]  # per drafted depth of the verified chain/spine

    @property
    def accepted_drafts(self) -> int:
        return len(self.path) - 1


def softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _per_position(accepted: int, depth: int) -> list[bool]:
    return [d < accepted for d in range(depth)]


def _walked(tree: DraftTree, picks: Picks) -> Verdict:
    """The path the target's picks take down the tree, and the bonus token where they leave it."""
    path, bonus = tree.walk(picks)
    return Verdict(
        path, [*tree.path_tokens(path), bonus], _per_position(len(path) - 1, tree.max_depth)
    )


def verify_greedy(tree: DraftTree, target_argmax: Sequence[int]) -> Verdict:
    """Follow the target argmax down the tree (a chain is a one-child-per-node tree)."""
    return _walked(tree, target_argmax)


def verify_tree_sampled(tree: DraftTree, draws: Picks) -> Verdict:
    """Target-only sampling walk: `draws[i]` is a draw from the target's distribution at node
    i (engine/sampling.RowDraws: made as the walk reads them on the CPU, all at once on CUDA),
    and the walk follows the child equal to each draw. The draws are independent and a node's
    is read only if the walk reaches it, so the committed tokens are distributed exactly as a
    walk that samples on its path; no node's full-vocabulary distribution leaves the device."""
    return _walked(tree, draws)


def verify_chain_sampled(
    draft_tokens: Sequence[int],
    target_probs: np.ndarray,
    rng: np.random.Generator,
    q_probs: np.ndarray | None = None,
) -> Verdict:
    """Speculative rejection sampling over one chain.

    target_probs: [k+1, V], row d = p(. | prefix + drafts[:d]); q_probs: [k, V] or None (one-hot)."""
    k = len(draft_tokens)
    vocab = target_probs.shape[-1]
    committed: list[int] = []
    for d, x in enumerate(draft_tokens):
        p = target_probs[d]
        qx = 1.0 if q_probs is None else float(q_probs[d, x])
        if rng.random() * qx < p[x]:  # accept with prob min(1, p(x)/q(x)), division-free
            committed.append(int(x))
            continue
        if q_probs is None:
            residual = p.copy()
            residual[x] = 0.0
        else:
            residual = np.maximum(p - q_probs[d], 0.0)
        total = residual.sum()
        residual = p if total <= 0 else residual / total
        committed.append(int(rng.choice(vocab, p=residual)))
        return Verdict(list(range(d + 1)), committed, _per_position(d, k))
    committed.append(int(rng.choice(vocab, p=target_probs[k])))
    return Verdict(list(range(k + 1)), committed, _per_position(k, k))
