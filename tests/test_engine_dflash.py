"""The DFlash drafter on a tiny random target + random drafter (fp32, CPU).

Greedy speculation with it (chain and DDTree, compacted and in-place tree KV, a draft window)
gives exactly plain greedy output; the context features it accumulates from prefill and from
each verify's accepted path equal those of one fresh forward over the final sequence (so the
hidden-state handoff follows the accepted tree nodes, not the drafted order); a saved drafter
reloads to the same drafts; bad files and mismatched targets are refused with one clear error.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specscope.backend import SamplingParams  # noqa: E402
from specscope.engine.backend import EngineBackend  # noqa: E402
from specscope.engine.factory import assemble  # noqa: E402
from specscope.engine.kv_cache import KVCache  # noqa: E402
from specscope.engine.loader import TINY_CONFIG, random_model  # noqa: E402
from specscope.engine.model import ForwardBatch, NewTokens  # noqa: E402
from specscope.engine.options import EngineOptions  # noqa: E402
from specscope.engine.speculative import dflash_model  # noqa: E402
from specscope.engine.speculative.dflash import DFlashDrafter  # noqa: E402
from specscope.engine.speculative.drafter import DraftRequest  # noqa: E402
from support.engine import run_to_end, tiny_dflash  # noqa: E402

pytestmark = pytest.mark.engine

PROMPTS = [
    [5, 17, 23, 42, 8, 5, 17, 23, 42, 8, 5, 17, 23],
    [61, 3, 3, 70, 61, 3, 3, 70, 61, 3],
    [11],  # one token: prefill writes nothing, the drafter starts from an empty context
]
MAX_TOKENS = 24
GREEDY = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the shared cores are oversubscribed; see test_engine_spec_lossless
    yield random_model(TINY_CONFIG, device="cpu", dtype=torch.float32, seed=3)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def drafter_dir(tiny, tmp_path_factory):
    model = tiny_dflash(tiny.config)
    return dflash_model.save(model, tmp_path_factory.mktemp("dflash"), dtype=torch.float32)


def _backend(loaded, page_size: int, **spec) -> EngineBackend:
    kv = KVCache.for_model(
        loaded.config, pool_tokens=2048 // page_size * page_size, page_size=page_size
    )
    return assemble(loaded, kv, EngineOptions.from_flags(page_size=page_size, max_batch=4, **spec))


@pytest.fixture(scope="module")
def reference(tiny):
    tokens, _ = run_to_end(_backend(tiny, 16), PROMPTS, GREEDY)
    assert all(len(t) == MAX_TOKENS for t in tokens)
    return tokens


@pytest.mark.parametrize(
    ("spec", "page_size"),
    [
        ({"verify": "chain", "num_draft_tokens": 5}, 16),
        ({"verify": "chain", "num_draft_tokens": 3, "draft_window": 4}, 16),
        ({"verify": "tree", "num_draft_tokens": 5, "budget": 16}, 16),
        ({"verify": "tree", "num_draft_tokens": 4, "budget": 12, "tree_kv": "inplace"}, 1),
        ({"verify": "tree", "num_draft_tokens": 5, "budget": 24, "draft_window": 5}, 16),
    ],
    ids=lambda v: v if isinstance(v, int) else "-".join(f"{k}={x}" for k, x in v.items()),
)
def test_dflash_speculation_is_lossless(tiny, reference, drafter_dir, spec, page_size):
    backend = _backend(tiny, page_size, drafter=f"dflash:{drafter_dir}", **spec)
    assert backend.stepper.target_taps == (0, 2) and "draft_vocab" not in backend.info.extra
    tokens, steps = run_to_end(backend, PROMPTS, GREEDY)
    assert tokens == reference
    outs = [o for s in steps for o in s.outputs if o.tokens]
    assert all(o.proposed_drafts > 0 for o in outs[:3])
    assert all(len(o.tokens) <= o.accepted_drafts + 1 for o in outs)
    assert len(backend.stepper.drafter.contexts) == 0  # released with the requests
    assert all("observe" in s.timing for s in steps if s.timing)  # the context update, apart
    if spec["verify"] == "tree":
        # Top-K candidates per depth over a 97-token vocabulary: some drafts are accepted, so
        # the compaction and the feature handoff along accepted paths are exercised.
        assert max(o.accepted_drafts for o in outs) >= 1


@pytest.mark.parametrize("window", [None, 5])
def test_static_step_is_lossless(tiny, reference, drafter_dir, window):
    """The functions the CUDA graphs capture (run eagerly here), inside the engine: prefill
    chunks, accepted paths and several requests at once."""
    spec = {"verify": "tree", "num_draft_tokens": 5, "budget": 16, "draft_window": window}

    def drafts_per_step(path: str) -> tuple[list, list]:
        backend = _backend(tiny, 16, drafter=f"dflash:{drafter_dir}", **spec)
        d = backend.stepper.drafter
        backend.stepper.drafter = DFlashDrafter(
            d.model, d.target, top_k=d.top_k, draft_window=window, path=path
        )
        tokens, steps = run_to_end(backend, PROMPTS, GREEDY)
        counts = [[(o.proposed_drafts, o.accepted_drafts) for o in s.outputs] for s in steps]
        return tokens, counts

    tokens, counts = drafts_per_step("static")
    assert tokens == reference
    # lossless whatever the drafts: the same drafts as the engine's own eager path is the check
    assert counts == drafts_per_step("ring")[1]


def _full_taps(loaded, tokens, taps):
    cfg = loaded.config
    kv = KVCache(
        num_layers=cfg.num_layers,
        num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        num_pages=8,
        page_size=16,
    )
    seq = kv.admit("x", len(tokens))
    item = NewTokens(
        list(tokens),
        list(range(len(tokens))),
        kv.alloc_slots(seq, len(tokens)),
        kv.context_slots(seq),
    )
    _, hidden = loaded.model.forward_taps(
        ForwardBatch.pack([item], "cpu", kv.pad_slot), kv, taps, False
    )
    return hidden[0]


@pytest.mark.parametrize("verify", ["chain", "tree"])
def test_context_features_follow_the_committed_sequence(tiny, drafter_dir, verify):
    backend = _backend(
        tiny, 16, drafter=f"dflash:{drafter_dir}", verify=verify, num_draft_tokens=5, budget=16
    )
    run_to_end(backend, PROMPTS[:2], GREEDY, release=False)
    drafter = backend.stepper.drafter
    for rid in ("r0", "r1"):
        req = backend.requests[rid]
        ctx = drafter.contexts.get(rid)
        cached = req.tokens[:-1]  # the pending token's features come with the next verify
        assert ctx.length == len(cached) == req.seq.context_len
        full = _full_taps(tiny, cached, drafter.target_taps)
        with torch.inference_mode():
            fused = drafter.model.fuse(full[None])
            want = drafter.model.context_kv(fused, torch.arange(len(cached))[None])
        for (k, v), (got_k, got_v) in zip(want, ctx.rows(), strict=True):
            torch.testing.assert_close(got_k, k[0], atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(got_v, v[0], atol=1e-4, rtol=1e-4)


def test_reload_gives_the_same_drafts_and_window_limits_the_view(tiny, drafter_dir):
    taps = tuple(dflash_model.load(drafter_dir).config.target_layer_ids)
    tokens = PROMPTS[0] + [9, 30, 44, 2, 71, 60, 12, 5, 88]
    hidden = _full_taps(tiny, tokens[:-1], taps)
    drafts = []
    for window in (None, None, 4):
        d = DFlashDrafter(dflash_model.load(drafter_dir), tiny.model, top_k=3, draft_window=window)
        d.observe("a", hidden[:7])
        d.observe("a", hidden[7:])
        drafts.append(d.propose([DraftRequest("a", tokens, 5)])[0])
    full, again, windowed = drafts
    assert full.chain == again.chain and len(full.chain) == 5
    np.testing.assert_allclose(full.topk_logprobs, again.topk_logprobs, atol=1e-6)
    assert full.topk_tokens.shape == (5, 3) and np.all(np.diff(full.topk_logprobs, axis=1) <= 0)
    assert full.chain == full.topk_tokens[:, 0].tolist()
    # A window of 4 is the same as a drafter that only ever saw the last 4 positions
    # (RoPE is relative: absolute positions kept, older rows invisible): the reference store,
    # its rows cut by hand.
    alone = DFlashDrafter(dflash_model.load(drafter_dir), tiny.model, top_k=3, path="growing")
    alone.observe("a", hidden)
    ctx = alone.contexts.get("a")
    ctx.keys = [k[-4:] for k in ctx.keys]
    ctx.values = [v[-4:] for v in ctx.values]
    np.testing.assert_allclose(
        alone.propose([DraftRequest("a", tokens, 5)])[0].topk_logprobs,
        windowed.topk_logprobs,
        atol=1e-5,
    )
    assert not np.allclose(windowed.topk_logprobs, full.topk_logprobs, atol=1e-3)


def test_bad_drafter_files_and_targets_are_refused(tiny, drafter_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        dflash_model.resolve_path(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    (tmp_path / "model.safetensors").write_bytes((drafter_dir / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="not a DFlash drafter config"):
        dflash_model.load(tmp_path)
    raw = json.loads((drafter_dir / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "num_layers": 3}))
    with pytest.raises(ValueError, match="does not match its config"):
        dflash_model.load(tmp_path)
    other = random_model(
        TINY_CONFIG.__class__(**{**TINY_CONFIG.__dict__, "hidden_size": 48}), seed=1
    )
    with pytest.raises(ValueError, match="made for a target"):
        DFlashDrafter(dflash_model.load(drafter_dir), other.model)
    with pytest.raises(ValueError, match="drafts at most 5"):
        _backend(tiny, 16, drafter=f"dflash:{drafter_dir}", num_draft_tokens=6)


def test_sampled_dflash_speculation_is_reproducible(tiny, drafter_dir):
    params = SamplingParams(max_tokens=16, temperature=0.8, top_p=0.95, seed=7, ignore_eos=True)
    runs = []
    for verify in ("chain", "chain", "tree"):
        backend = _backend(
            tiny, 16, drafter=f"dflash:{drafter_dir}", verify=verify, num_draft_tokens=4, budget=8
        )
        for i, p in enumerate(PROMPTS[:2]):
            backend.prefill_sync(f"s{i}", p, params)
        out = {"s0": [], "s1": []}
        while live := [r for r in out if not backend.requests[r].finished]:
            for o in backend.step_sync(live).outputs:
                out[o.request_id].extend(o.tokens)
        runs.append(out)
    assert runs[0] == runs[1] and all(len(t) == 16 for r in runs for t in r.values())


def _with_vocab(drafter_dir, folder, ids: list[int], dtype=torch.float32):
    """The fixture's drafter, its weights unchanged, restricted to the draft vocabulary `ids`."""
    restricted = dflash_model.with_draft_vocab(dflash_model.load(drafter_dir), torch.tensor(ids))
    return dflash_model.save(restricted, folder, dtype=dtype)


def test_a_draft_vocabulary_of_every_token_drafts_as_the_whole_head(tiny, drafter_dir, tmp_path):
    taps = tuple(dflash_model.load(drafter_dir).config.target_layer_ids)
    tokens = PROMPTS[0] + [9, 30, 44, 2, 71]
    hidden = _full_taps(tiny, tokens[:-1], taps)
    every_id = list(range(tiny.config.vocab_size))
    every = _with_vocab(drafter_dir, tmp_path / "every", every_id)
    # the ids survive a bf16 save as they are (int64), where the parameters are rounded
    in_bf16 = _with_vocab(drafter_dir, tmp_path / "bf16", every_id, torch.bfloat16)
    assert dflash_model.load(in_bf16).draft_vocab.tolist() == every_id
    drafts = []
    for folder in (every, drafter_dir):
        d = DFlashDrafter(dflash_model.load(folder), tiny.model, top_k=3)
        d.observe("a", hidden)
        drafts.append(d.propose([DraftRequest("a", tokens, 5)])[0])
    assert drafts[0].chain == drafts[1].chain
    np.testing.assert_allclose(drafts[0].topk_logprobs, drafts[1].topk_logprobs, atol=1e-6)


@pytest.mark.parametrize("path", ["ring", "static"])
def test_a_drafter_drafts_only_from_its_vocabulary_and_stays_lossless(
    tiny, reference, drafter_dir, tmp_path, path
):
    ids = list(range(0, tiny.config.vocab_size, 3))  # a third of the tokens
    folder = _with_vocab(drafter_dir, tmp_path / "third", ids)
    spec = {"verify": "tree", "num_draft_tokens": 5, "budget": 16}
    backend = _backend(tiny, 16, drafter=f"dflash:{folder}", **spec)
    assert backend.info.extra["draft_vocab"] == len(ids)  # the server says so
    d = backend.stepper.drafter
    backend.stepper.drafter = DFlashDrafter(d.model, d.target, top_k=d.top_k, path=path)
    proposed: list = []
    propose = backend.stepper.drafter.propose
    backend.stepper.drafter.propose = lambda reqs: proposed.extend(out := propose(reqs)) or out
    tokens, steps = run_to_end(backend, PROMPTS, GREEDY)
    assert tokens == reference
    drafts = [d.topk_tokens for d in proposed if d.topk_tokens is not None]
    drafted = {int(t) for top in drafts for t in np.ravel(top)}
    assert drafted and drafted <= set(ids)
    # drafts from a third of the vocabulary still get accepted (where the target's token is
    # one of them)
    accepted = [o.accepted_drafts for s in steps for o in s.outputs if o.tokens]
    assert max(accepted) >= 1


def test_a_draft_vocabulary_that_is_not_sorted_distinct_ids_is_refused(drafter_dir, tmp_path):
    folder = _with_vocab(drafter_dir, tmp_path / "bad", [4, 2, 9])
    with pytest.raises(ValueError, match="not sorted distinct ids"):
        dflash_model.load(folder)
    raw = json.loads((drafter_dir / "config.json").read_text())
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "config.json").write_text(json.dumps({**raw, "draft_vocab_size": 10**6}))
    (tmp_path / "big" / "model.safetensors").write_bytes(
        (drafter_dir / "model.safetensors").read_bytes()
    )
    with pytest.raises(ValueError, match="draft_vocab_size 1000000 outside"):
        dflash_model.load(tmp_path / "big")
