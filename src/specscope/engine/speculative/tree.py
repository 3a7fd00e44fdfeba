"""Draft trees: DDTree best-first construction, the verify inputs, and walking the accepted path.

A tree is stored flat, the way the target's verify forward needs it: node 0 is the root (the
last committed token, whose KV is not in the cache yet), nodes are numbered so that a parent
always comes before its children, and each node carries its token, parent index and depth.
From that we derive the ancestor-only attention mask and depth-based positions (siblings share
a RoPE position: they are alternatives for the same slot, not consecutive tokens).

A chain (one drafted sequence) is just a tree whose nodes each have one child, so chain and
tree verification share every piece of code below.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class Picks(Protocol):
    """The target's token at each node, by node index: a list or array (every node's, e.g. the
    argmax), or draws made as they are read (engine/sampling.RowDraws)."""

    def __getitem__(self, node: int, /) -> int: ...


@dataclass
class DraftTree:
    """Flat tree: arrays of length N+1 (root + N drafted nodes), parents[i] < i for i > 0."""

    tokens: np.ndarray  # int64 [N+1]; tokens[0] = root token
    parents: np.ndarray  # int64 [N+1]; parents[0] = -1
    depths: np.ndarray  # int64 [N+1]; depths[0] = 0
    logprobs: np.ndarray = field(
        default=None
    )  # float64 [N+1]: draft log-prob of the path to the node

    def __post_init__(self) -> None:
        if self.logprobs is None:
            self.logprobs = np.zeros(len(self.tokens), dtype=np.float64)

    @property
    def num_nodes(self) -> int:
        """Drafted nodes, root excluded (what counts against the budget)."""
        return len(self.tokens) - 1

    @property
    def max_depth(self) -> int:
        return int(self.depths.max()) if len(self.depths) else 0

    def positions(self, start: int) -> np.ndarray:
        """Depth-based positions: the root sits at `start` (its absolute position in the sequence)."""
        return start + self.depths

    def attention_mask(self) -> np.ndarray:
        """Bool [N+1, N+1]: row i may attend column j iff j is i or an ancestor of i.

        Built row by row from the parent's row (parents come first), O(N^2) bools; the cached
        past is visible to every node and is not part of this matrix."""
        n = len(self.tokens)
        mask = np.zeros((n, n), dtype=bool)
        for i in range(n):
            p = self.parents[i]
            if p >= 0:
                mask[i] = mask[p]
            mask[i, i] = True
        return mask

    def children(self) -> list[dict[int, int]]:
        """children[node][token] = child node index."""
        kids: list[dict[int, int]] = [{} for _ in range(len(self.tokens))]
        for i in range(1, len(self.tokens)):
            kids[int(self.parents[i])][int(self.tokens[i])] = i
        return kids

    def walk(self, target_tokens: Picks) -> tuple[list[int], int]:
        """Follow the target's own choice at each node (argmax at T=0, a sample otherwise).

        target_tokens[i] is the token the target picks after node i's prefix. Returns the
        accepted path (node indices, root first) and the bonus token: the target's pick at the
        last accepted node, which has no matching child."""
        kids = self.children()
        path = [0]
        cur = 0
        while True:
            nxt = kids[cur].get(int(target_tokens[cur]))
            if nxt is None:
                return path, int(target_tokens[cur])
            path.append(nxt)
            cur = nxt

    def path_tokens(self, path: Sequence[int]) -> list[int]:
        """Tokens of the accepted drafted nodes (root excluded)."""
        return [int(self.tokens[i]) for i in path[1:]]


def chain_tree(root_token: int, draft_tokens: Sequence[int]) -> DraftTree:
    """A single drafted sequence as a tree (node i's parent is node i-1)."""
    n = len(draft_tokens) + 1
    tokens = np.array([root_token, *draft_tokens], dtype=np.int64)
    return DraftTree(
        tokens=tokens,
        parents=np.arange(-1, n - 1, dtype=np.int64),
        depths=np.arange(n, dtype=np.int64),
    )


def trie_tree(root_token: int, sequences: Sequence[Sequence[int]], budget: int) -> DraftTree:
    """Merge candidate sequences (best first) into a prefix tree of at most `budget` nodes.

    Used for drafters that propose whole sequences (n-gram lookup with several matches): shared
    prefixes are verified once."""
    tokens, parents, depths = [root_token], [-1], [0]
    index: dict[tuple[int, int], int] = {}
    for seq in sequences:
        cur = 0
        for tok in seq:
            key = (cur, int(tok))
            if key not in index:
                if len(tokens) - 1 >= budget:
                    break
                index[key] = len(tokens)
                tokens.append(int(tok))
                parents.append(cur)
                depths.append(depths[cur] + 1)
            cur = index[key]
    return DraftTree(
        tokens=np.array(tokens, dtype=np.int64),
        parents=np.array(parents, dtype=np.int64),
        depths=np.array(depths, dtype=np.int64),
    )


def build_ddtree(
    root_token: int,
    topk_tokens: np.ndarray,
    topk_logprobs: np.ndarray,
    budget: int,
) -> DraftTree:
    """DDTree (Ringel & Romano, Alg. 1): the `budget` most probable prefixes under the factorised
    draft distribution Q(y) = prod_d q_d(y_d), found best-first with a heap in O(B log B).

    topk_tokens / topk_logprobs: [L, K] per-depth candidates sorted by decreasing log-prob (only
    the top-K per depth can ever be in an optimal tree, K = min(B, |V|)). Each popped node pushes
    its next sibling (same parent, next rank) and its first child (next depth, rank 0); because
    extending a prefix never raises its probability, the popped set is prefix-closed and is
    exactly the B best prefixes. Nodes are numbered in pop order, so parents precede children.
    """
    topk_tokens = np.asarray(topk_tokens)
    topk_logprobs = np.asarray(topk_logprobs, dtype=np.float64)
    depth_count, k = topk_tokens.shape if topk_tokens.ndim == 2 else (0, 0)
    tokens, parents, depths, logw = [int(root_token)], [-1], [0], [0.0]
    if depth_count == 0 or k == 0 or budget <= 0:
        return DraftTree(
            *(
                np.array(a, dtype=t)
                for a, t in (
                    (tokens, np.int64),
                    (parents, np.int64),
                    (depths, np.int64),
                    (logw, np.float64),
                )
            )
        )
    # Heap entries: (-logw, tie-break counter, parent node, depth (1-based), rank).
    counter = 0
    heap = [(-topk_logprobs[0, 0], counter, 0, 1, 0)]
    while heap and len(tokens) - 1 < budget:
        neg_lw, _, parent, d, r = heapq.heappop(heap)
        lw = -neg_lw
        node = len(tokens)
        tokens.append(int(topk_tokens[d - 1, r]))
        parents.append(parent)
        depths.append(d)
        logw.append(lw)
        if r + 1 < k:
            counter += 1
            sib = lw - topk_logprobs[d - 1, r] + topk_logprobs[d - 1, r + 1]
            heapq.heappush(heap, (-sib, counter, parent, d, r + 1))
        if d < depth_count:
            counter += 1
            heapq.heappush(heap, (-(lw + topk_logprobs[d, 0]), counter, node, d + 1, 0))
    return DraftTree(
        tokens=np.array(tokens, dtype=np.int64),
        parents=np.array(parents, dtype=np.int64),
        depths=np.array(depths, dtype=np.int64),
        logprobs=np.array(logw, dtype=np.float64),
    )
