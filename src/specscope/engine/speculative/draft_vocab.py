"""A drafter's vocabulary: the target tokens it may propose, and the LM head over only those.

Why: a DFlash drafter shares the target's LM head, and for a 576-wide drafter of SmolLM2 that
head (49,152 x 576) is most of a block's cost: on this CPU, one thread, the head over 7 draft
slots is ~24-30 ms of a ~31 ms propose, and 16,384 rows of it ~4.4 ms
(bench/dflash_draft_vocab.py). EAGLE-3 drafts over the target's most frequent tokens for the same
reason. A token outside the vocabulary can never be drafted (its slot is a miss, as a wrong
guess is), so the vocabulary is the most frequent tokens of text like what the target writes
(`choose`): the training data's own tokens, or a corpus. Verification stays the target's, so
output is unchanged whatever the vocabulary (lossless).

`DraftHead` is the one place the restriction lives: the inference block step
(dflash_block.py), its CUDA graph and the trainer's loss (training/loss.py) all go through it.
Without a vocabulary it is the target's head as it is.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
import torch.nn.functional as F


def count_tokens(sequences: Iterable[Iterable[int]], vocab_size: int) -> np.ndarray:
    """How often each token id occurs over `sequences` ([vocab_size] int64)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for seq in sequences:
        ids = np.asarray(list(seq), dtype=np.int64)
        if ids.size:
            counts += np.bincount(ids, minlength=vocab_size)[:vocab_size]
    return counts


def choose(counts: np.ndarray, size: int) -> np.ndarray:
    """The `size` most frequent ids (ties to the lower id), sorted by id; only ids that occur,
    so fewer than `size` when fewer occur (an id never seen cannot be learnt or ranked)."""
    if size <= 0:
        raise ValueError(f"a draft vocabulary needs at least one token, got size {size}")
    seen = np.flatnonzero(counts > 0)
    if not seen.size:
        raise ValueError("a draft vocabulary needs counted tokens: nothing was counted")
    order = seen[np.lexsort((seen, -counts[seen]))]  # count descending, then id ascending
    return np.sort(order[:size]).astype(np.int64)


def coverage(ids: np.ndarray, counts: np.ndarray) -> float:
    """The share of the counted tokens that the vocabulary `ids` holds (1.0 with nothing
    counted): a slot whose right token lies outside it is always a miss."""
    total = int(counts.sum())
    return float(counts[ids].sum()) / total if total else 1.0


class DraftHead:
    """The target's LM head over a drafter's vocabulary (`ids`, sorted target ids; None: the
    whole vocabulary): its rows gathered once, and the way between draft and target ids."""

    def __init__(self, weight: torch.Tensor, ids: torch.Tensor | None):
        self.ids = None if ids is None else ids.to(weight.device, torch.long)
        if self.ids is None:
            self.weight = weight.detach()
            self._index_of = None
        else:
            self.weight = weight.detach().index_select(0, self.ids).contiguous()
            index_of = torch.full((weight.shape[0],), -1, dtype=torch.long, device=weight.device)
            index_of[self.ids] = torch.arange(len(self.ids), device=weight.device)
            self._index_of = index_of

    @property
    def size(self) -> int:
        return self.weight.shape[0]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary for hidden rows [N, D], in the head's dtype."""
        return F.linear(hidden.to(self.weight.dtype), self.weight)

    def to_target(self, index: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary indices -> the target's token ids."""
        return index if self.ids is None else self.ids[index]

    def from_target(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Target token ids -> (draft indices, whether the token is in the vocabulary); a token
        outside it maps to index 0 with False: the trainer gives its slot no weight and counts
        it a miss."""
        if self._index_of is None:
            return tokens, torch.ones_like(tokens, dtype=torch.bool)
        index = self._index_of[tokens]
        return index.clamp_min(0), index >= 0
