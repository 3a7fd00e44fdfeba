"""How the engine groups the requests it prefills together on a GPU (engine/backend.py
`_prefill_groups`): by the tokens of each one's first chunk against the forward's budget, in
order, never splitting a request, never an empty group."""

from __future__ import annotations

from types import SimpleNamespace

from specscope.engine.backend import _prefill_groups


def _reqs(*prompt_lengths: int) -> list[SimpleNamespace]:
    # a Request's tokens hold the prompt; its last token is left for the first step
    return [SimpleNamespace(tokens=[0] * (n + 1), name=i) for i, n in enumerate(prompt_lengths)]


def _names(groups) -> list[list[int]]:
    return [[r.name for r in g] for g in groups]


def test_short_prompts_fill_a_forward_by_their_tokens_not_by_whole_chunks():
    groups = _prefill_groups(_reqs(*[256] * 130), chunk=2048, budget=16384)
    assert [len(g) for g in groups] == [64, 64, 2]
    assert [r.name for g in groups for r in g] == list(range(130))  # in order


def test_a_long_prompt_counts_one_chunk_and_a_prompt_over_budget_goes_alone():
    assert _names(_prefill_groups(_reqs(10_000, 100, 100), 2048, 4096)) == [[0, 1, 2]]
    assert _names(_prefill_groups(_reqs(3000, 3000, 10), 4096, 4096)) == [[0], [1, 2]]
    assert _names(_prefill_groups(_reqs(1), 2048, 16)) == [[0]]
    assert _prefill_groups([], 2048, 16384) == []
