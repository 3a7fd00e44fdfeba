"""Prompt-lookup drafter: longest n-gram first, most recent match first, window respected."""

from __future__ import annotations

import pytest

from specscope.engine.speculative.drafter import DraftRequest
from specscope.engine.speculative.ngram import NgramDrafter


def test_continues_most_recent_longest_match():
    d = NgramDrafter(min_ngram=1, max_ngram=3, num_candidates=1)
    toks = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    assert d.lookup(toks, 2) == [[7, 8]]  # 3-gram [1,2,3] last seen before position 5..7


def test_several_candidates_are_distinct_and_ordered():
    d = NgramDrafter(min_ngram=1, max_ngram=2, num_candidates=3)
    toks = [4, 5, 6, 4, 5, 7, 4, 5, 7, 0, 4, 5]
    assert d.lookup(toks, 2) == [[7, 0], [7, 4], [6, 4]]


def test_falls_back_to_shorter_ngram_and_empty_when_no_match():
    d = NgramDrafter(min_ngram=1, max_ngram=3)
    assert d.lookup([1, 2, 3, 4, 2], 3) == [[3, 4, 2]]
    assert d.lookup([1, 2, 3, 4], 3) == []
    assert d.lookup([], 3) == [] and d.lookup([5], 3) == []
    assert NgramDrafter(min_ngram=2).lookup([1, 2, 3, 4, 2], 3) == []


def test_draft_window_hides_older_tokens():
    toks = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]
    assert NgramDrafter(max_ngram=2).lookup(toks, 2) == [[3, 4]]
    assert NgramDrafter(max_ngram=2, draft_window=5).lookup(toks, 2) == []


def test_propose_batch_and_bad_config():
    d = NgramDrafter(max_ngram=2)
    out = d.propose([DraftRequest("a", [1, 2, 1], 2), DraftRequest("b", [3], 2)])
    assert [o.chain for o in out] == [[2, 1], []]
    with pytest.raises(ValueError):
        NgramDrafter(min_ngram=3, max_ngram=2)


def test_the_engine_states_its_draft_window():
    """Server info carries the drafter's window (SGLang's speculative_draft_window_size), which
    diagnose checks a found acceptance cliff against."""
    from specscope.engine.options import SpeculationOptions
    from specscope.engine.speculative.stepper import SpeculativeStepper

    windowed = SpeculativeStepper(
        NgramDrafter(draft_window=8), SpeculationOptions(drafter="ngram", draft_window=8)
    )
    assert windowed.speculation().extra["draft_window"] == 8
    unbounded = SpeculativeStepper(NgramDrafter(), SpeculationOptions(drafter="ngram"))
    assert "draft_window" not in unbounded.speculation().extra
