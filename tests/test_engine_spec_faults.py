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


def _per_step(steps) -> float:
    """Tokens committed per request per step (what a client reads as commit length)."""
    outs = [o for s in steps for o in s.outputs if o.tokens]
    return sum(len(o.tokens) for o in outs) / len(outs)


@pytest.mark.parametrize("faults", [(), ("draft-budget=4",)])
def test_draft_budget_makes_acceptance_fall_with_the_batch_and_only_then(tiny, faults):
    """`draft-budget=4` with k = 4: a request alone keeps its whole draft, four in a batch keep
    one token each, so tokens per step fall with the batch; the output stays the target's.
    Without the fault the same four requests commit as much per step as one alone (the
    control: the fall is the fault's, not the batch's)."""
    spec = {**NGRAM, "verify": "chain", "num_draft_tokens": 4, "faults": faults}
    prompt = PROMPTS[1]  # 2.67 tokens a step alone on this model
    alone_tokens, alone = run_to_end(backend_for(tiny, 16, **spec), [prompt], GREEDY)
    batch_tokens, batch = run_to_end(backend_for(tiny, 16, **spec), [prompt] * 4, GREEDY)
    assert batch_tokens == alone_tokens * 4
    assert max(o.proposed_drafts for s in batch for o in s.outputs) <= (1 if faults else 4)
    if faults:
        assert _per_step(batch) < 0.8 * _per_step(alone)
    else:
        assert _per_step(batch) == pytest.approx(_per_step(alone), rel=0.05)
    assert _per_step(alone) > 1.5  # the drafts are accepted alone: there is something to lose


def test_draft_budget_shares_the_budget_and_spends_it_at_most():
    """N // B tokens each: 4 alone, 2 in a pair, none for five requests (a Draft with nothing)."""
    from specscope.engine.speculative.drafter import Draft
    from specscope.engine.speculative.faults import BatchBudgetDrafter

    class Fixed:
        name = "fixed"

        def propose(self, requests):
            return [Draft(sequences=[[1, 2, 3, 4], [1, 2, 5]]) for _ in requests]

        def release(self, request_id):
            return None

    d = BatchBudgetDrafter(Fixed(), 4)
    reqs = [DraftRequest(f"r{i}", [0], 4) for i in range(5)]
    assert d.propose(reqs[:1])[0].sequences == [[1, 2, 3, 4], [1, 2, 5]]
    assert [x.sequences for x in d.propose(reqs[:2])] == [[[1, 2], [1, 2]]] * 2
    assert all(x.chain == [] for x in d.propose(reqs))


@pytest.mark.parametrize(
    ("faults", "words"),
    [(("draft-budget",), "drafted tokens per step >= 1, got None"),
     (("draft-budget=0",), "got '0'"),
     (("spec-no-accept=1",), "takes no value"),
     (("graph-off-above=x",), "a batch size >= 1, got 'x'")],
)  # fmt: skip
def test_fault_values_are_checked_where_they_are_given(faults, words):
    with pytest.raises(ValueError, match=words):
        EngineOptions.from_flags(drafter="ngram", faults=faults)


def test_graph_off_above_is_a_runner_option_that_needs_no_drafter():
    opts = EngineOptions.from_flags(drafter="none", faults=("graph-off-above=2",))
    assert opts.graph_off_above == 2 and opts.speculation is None
    spec = EngineOptions.from_flags(drafter="ngram", faults=("graph-off-above=2", "draft-budget=4"))
    assert spec.graph_off_above == 2 and spec.speculation.faults == ("draft-budget=4",)


def test_graph_off_above_on_cpu_changes_nothing_and_the_server_says_so(tiny, reference):
    """No CUDA graphs on CPU: the same eager steps, and the server's info states the fault as
    having nothing to act on, with no graph coverage claimed."""
    backend = backend_for(tiny, 16, faults=("graph-off-above=1",))
    assert run_to_end(backend, PROMPTS, GREEDY)[0] == reference
    extra = backend.info.extra
    assert extra["fast_path"] == "EagerRunner" and "graph_max_batch" not in extra
    assert extra["engine_faults"] == "graph-off-above=1 (no CUDA graphs on this device: no effect)"


def test_eager_above_dispatches_by_batch_size():
    """The graph-off-above dispatch, with stand-in runners (no CUDA here): batches of up to B
    requests go to the graphs, larger ones to the eager forward; both share the pool."""
    from types import SimpleNamespace

    from specscope.engine.faults import EagerAbove

    def runner(label):
        return SimpleNamespace(
            kv="pool",
            device="cuda",
            forward=lambda work, want_logits=True, tokens_on_device=None: (
                label,
                len(work),
                tokens_on_device,
            ),
            forward_hidden=lambda work, taps, want_logits=True: (label, len(work), taps),
            warmup=lambda: label + " warm",
        )

    r = EagerAbove(runner("graphs"), runner("eager"), max_graph_batch=2)
    assert [r.forward([0] * n)[0] for n in (1, 2, 3, 8)] == ["graphs", "graphs", "eager", "eager"]
    assert r.forward([0] * 3, True, "fed") == ("eager", 3, "fed")  # an overlapped step's tokens
    assert r.forward_hidden([0] * 3, (1,)) == ("eager", 3, (1,))
    assert r.kv == "pool" and r.warmup() == "graphs warm"
