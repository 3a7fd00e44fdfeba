"""A training step's input: all its sequences' blocks in ONE batch, a few blocks a row.

The drafter serves one block against one request's context (dflash.py); a step trains on a few
thousand blocks at once, each seeing its sequence's context features strictly before its anchor
and its own B slots. How blocks are laid out decides what attention costs, because
`block_hidden` attends over [context, the row's block slots] under a mask:
- all of a sequence's n blocks in one row (the first trainer, kept as `loss.block_loss`): every
  query also scores the n*B block keys of which it may see B (with 256 anchors, 4096 keys
  wasted against ~900 of context);
- one block a row: no wasted block keys, but the context keys are copied into every row (256
  copies of each sequence's context, through the attention's K/V, every layer);
- `blocks_per_row` m in between (default 16): m*B block keys a query, n/m copies of the
  context; at the GPU preset's shape that should move several times less memory through
  attention than either end (an estimate from the shapes; `bench/dflash_train_throughput.py
  --blocks-per-row 1,16,256` measures the choice). The result is the same up to float rounding for every m (tests compare m=1 and m>1 with
  the packed reference).
Either way the step is one forward and one backward, not one per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specscope.engine.model import host_to_device
from specscope.engine.training.dataset import Sample

BLOCKS_PER_ROW = 16


@dataclass
class StepBatch:
    tokens: torch.Tensor  # [G, L] long: the step's sequences, zero-padded to cover every label
    features: torch.Tensor  # [G, C, F]: tapped target features of positions 0..C-1
    row_seq: torch.Tensor  # [R] long: the sequence of each row of blocks
    anchors: torch.Tensor  # [R, m] long: each row's block anchors (0 in unused slots)
    valid: torch.Tensor  # [R, m] bool: which slots of a row hold a block
    seq: torch.Tensor  # [N] long: each block's sequence (blocks in row-major order)
    # [N]: 1 / (G * blocks of its sequence): the loss is then the mean over sequences of each
    # sequence's mean block loss, as when every sequence was its own backward
    weight: torch.Tensor

    @property
    def sequences(self) -> int:
        return self.tokens.shape[0]

    def label_slots(self, block_size: int) -> int:
        """Slots with a label (anchors x (B-1)): the unit of the trainer's tokens/s."""
        return len(self.seq) * (block_size - 1)


def context_length(anchors: list[np.ndarray]) -> int:
    """Positions whose features a step needs: a block sees the context strictly before its
    anchor, so up to the last anchor."""
    return int(max(int(a.max()) for a in anchors))


def _rows(anchors: list[np.ndarray], m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each sequence's anchors cut into rows of up to m: (row's sequence, anchors, valid)."""
    cut = [(i, a[s : s + m]) for i, a in enumerate(anchors) for s in range(0, len(a), m)]
    row_anchors = np.zeros((len(cut), m), dtype=np.int64)
    valid = np.zeros((len(cut), m), dtype=bool)
    for r, (_, a) in enumerate(cut):
        row_anchors[r, : len(a)], valid[r, : len(a)] = a, True
    return np.array([i for i, _ in cut]), row_anchors, valid


def pack(
    samples: list[Sample],
    anchors: list[np.ndarray],
    features: torch.Tensor,
    device: torch.device,
    blocks_per_row: int = BLOCKS_PER_ROW,
) -> StepBatch:
    """The step's blocks (`anchors[i]` of `samples[i]`, each non-empty), `blocks_per_row` a
    row, with their sequences' `features` [G, >= context_length(anchors), F], on `device`."""
    g = len(samples)
    length = max(len(s.tokens) for s in samples)
    tokens = np.zeros((g, length), dtype=np.int64)
    for i, s in enumerate(samples):
        tokens[i, : len(s.tokens)] = s.tokens
    counts = np.array([len(a) for a in anchors])
    row_seq, row_anchors, valid = _rows(anchors, min(blocks_per_row, int(counts.max())))
    seq = np.repeat(row_seq, valid.sum(1))

    def dev(a: np.ndarray) -> torch.Tensor:
        # pinned and not waited for on CUDA: a pageable copy would hold the host until the GPU
        # had finished every step queued before it, so no step's host side ran beside the GPU
        return host_to_device(np.ascontiguousarray(a), torch.device(device))

    return StepBatch(
        tokens=dev(tokens),
        features=features[:, : context_length(anchors)].to(device),
        row_seq=dev(row_seq),
        anchors=dev(row_anchors),
        valid=dev(valid),
        seq=dev(seq),
        weight=dev((1.0 / (g * counts[seq])).astype(np.float32)),
    )
