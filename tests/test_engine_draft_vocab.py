"""The draft vocabulary (engine/speculative/draft_vocab.py): the most frequent ids, their
coverage, and the LM head over them, which maps draft indices to target ids and back."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specscope.engine.speculative.draft_vocab import (  # noqa: E402
    DraftHead,
    choose,
    count_tokens,
    coverage,
)


def test_the_most_frequent_ids_ties_to_the_lower_and_only_ids_that_occur():
    counts = count_tokens([[5, 5, 9, 2, 9, 7], [9, 3, 3, 5]], vocab_size=12)
    assert counts.tolist() == [0, 0, 1, 2, 0, 3, 0, 1, 0, 3, 0, 0]
    # 5 and 9 (3 each), then 3 (2), then 2 before 7 (1 each, the lower id first); sorted by id
    assert choose(counts, 4).tolist() == [2, 3, 5, 9]
    assert choose(counts, 2).tolist() == [5, 9]
    assert choose(counts, 100).tolist() == [2, 3, 5, 7, 9]  # never an id that did not occur
    assert coverage(np.array([5, 9]), counts) == pytest.approx(6 / 10)
    assert coverage(np.array([5]), np.zeros(12, dtype=np.int64)) == 1.0
    with pytest.raises(ValueError, match="at least one token"):
        choose(counts, 0)
    with pytest.raises(ValueError, match="nothing was counted"):
        choose(np.zeros(12, dtype=np.int64), 3)


def test_the_head_over_a_vocabulary_is_those_rows_of_the_target_head():
    weight = torch.randn(20, 6)
    hidden = torch.randn(4, 6)
    ids = torch.tensor([1, 4, 7, 19])
    head = DraftHead(weight, ids)
    assert head.size == 4
    torch.testing.assert_close(head.logits(hidden), (hidden @ weight.t())[:, ids])
    assert head.to_target(torch.tensor([[0, 3], [2, 1]])).tolist() == [[1, 19], [7, 4]]
    index, known = head.from_target(torch.tensor([7, 2, 19, 1]))
    assert index.tolist() == [2, 0, 3, 0] and known.tolist() == [True, False, True, True]
    # without a vocabulary it is the target's head as it is
    whole = DraftHead(weight, None)
    assert whole.size == 20 and torch.equal(whole.weight, weight)
    torch.testing.assert_close(whole.logits(hidden), hidden @ weight.t())
    tokens = torch.tensor([3, 11])
    assert whole.to_target(tokens) is tokens and whole.from_target(tokens)[1].all()


def test_a_drafter_keeps_its_head_until_the_head_or_the_vocabulary_changes():
    from specscope.engine.loader import TINY_CONFIG
    from specscope.engine.speculative import dflash_model

    cfg = dflash_model.DFlashConfig.for_target("tiny", TINY_CONFIG, num_layers=1, block_size=4)
    whole = dflash_model.DFlashDraftModel(cfg)
    whole.init_weights(0, 0.5)
    model = dflash_model.with_draft_vocab(whole, torch.tensor([1, 4, 7]))
    # the same weights, restricted
    assert all(
        torch.equal(v, whole.state_dict()[k])
        for k, v in model.state_dict().items()
        if k != "draft_vocab"
    )
    weight = torch.randn(TINY_CONFIG.vocab_size, TINY_CONFIG.hidden_size)
    head = model.draft_head(weight)
    assert model.draft_head(weight) is head  # asked every training step: gathered once
    model.draft_vocab.copy_(torch.tensor([2, 5, 8]))  # in place, as load_state_dict does
    moved = model.draft_head(weight)
    assert moved is not head and torch.equal(moved.weight, weight[[2, 5, 8]])
    other = weight.clone()
    assert model.draft_head(other) is not moved
    kept = model.draft_head(weight)
    assert model.draft_head(weight) is kept
    weight.mul_(2)  # the same head tensor changed in place: gathered again
    regathered = model.draft_head(weight)
    assert regathered is not kept and torch.equal(regathered.weight, weight[[2, 5, 8]])
