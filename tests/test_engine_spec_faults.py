"""The engine's drafter faults (docs/faults.md): real mechanisms, lossless like every drafter
(the target decides every token), each breaking speculation in the way its name says."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from specscope.engine.options import EngineOptions  # noqa: E402
from specscope.engine.speculative.drafter import DraftRequest  # noqa: E402
from specscope.engine.speculative.faults import PromptOnlyNgramDrafter  # noqa: E402
from support.engine import GREEDY, NGRAM, PROMPTS, backend_for, run_to_end, tiny_model  # noqa: E402

pytestmark = pytest.mark.engine

tiny = pytest.fixture(scope="module", name="tiny")(tiny_model)


@pytest.fixture(scope="module")
def reference(tiny):
    return run_to_end(backend_for(tiny, 16), PROMPTS, GREEDY)[0]


def _drafts(steps) -> tuple[int, int]:
    outs = [o for s in steps for o in s.outputs if o.tokens]
    return sum(o.proposed_drafts for o in outs), sum(o.accepted_drafts for o in outs)


@pytest.mark.parametrize("verify", ["chain", "tree"])
def test_spec_no_accept_verifies_drafts_and_accepts_none(tiny, reference, verify):
    """Ids off by one against the target's vocabulary: every draft is verified at full cost
    and rejected; the output is still the target's own."""
    spec = {**NGRAM, "verify": verify, "num_draft_tokens": 4, "budget": 8}
    clean_tokens, clean = run_to_end(backend_for(tiny, 16, **spec), PROMPTS, GREEDY)
    tokens, faulty = run_to_end(
        backend_for(tiny, 16, **spec, faults=("spec-no-accept",)), PROMPTS, GREEDY
    )
    assert tokens == clean_tokens == reference
    proposed, accepted = _drafts(faulty)
    assert _drafts(clean)[1] > 0 and proposed > 0 and accepted == 0


def test_prompt_only_ngram_finds_the_prompt_and_never_the_output():
    """The index holds the prompt as it was at prefill: a repeat inside the output is not
    found, a return to the prompt's text is."""
    d = PromptOnlyNgramDrafter(min_ngram=1, max_ngram=2, num_candidates=1)
    prompt = [1, 2, 3, 4]
    first = DraftRequest("r", [*prompt, 9], 2)
    assert d.propose([first])[0].sequences == []
    output_repeat = DraftRequest("r", [*prompt, 9, 7, 8, 9], 2)  # 9 recurs, in the output only
    assert d.propose([output_repeat])[0].sequences == []
    back_to_prompt = DraftRequest("r", [*prompt, 9, 7, 8, 2], 2)
    assert d.propose([back_to_prompt])[0].sequences == [[3, 4]]
    d.release("r")
    assert d._prompt_len == {}


def test_prompt_only_ngram_is_lossless_and_accepts_less_than_the_full_index(tiny, reference):
    spec = {**NGRAM, "verify": "chain", "num_draft_tokens": 4}
    tokens, faulty = run_to_end(
        backend_for(tiny, 16, **spec, faults=("prompt-only-ngram",)), PROMPTS, GREEDY
    )
    _, clean = run_to_end(backend_for(tiny, 16, **spec), PROMPTS, GREEDY)
    assert tokens == reference
    assert _drafts(faulty)[1] < _drafts(clean)[1]


def test_faults_are_checked_where_they_are_given():
    with pytest.raises(ValueError, match="unknown engine fault"):
        EngineOptions.from_flags(drafter="ngram", faults=("no-such-fault",))
    with pytest.raises(ValueError, match="need a drafter"):
        EngineOptions.from_flags(drafter="none", faults=("spec-no-accept",))


def test_prompt_only_ngram_needs_the_ngram_drafter(tiny):
    with pytest.raises(ValueError, match="n-gram drafter"):
        backend_for(tiny, 16, drafter="layers:1", faults=("prompt-only-ngram",))
