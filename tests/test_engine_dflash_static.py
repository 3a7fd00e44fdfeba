"""The DFlash drafter's fixed-size context store and static-buffer step against its reference.

One script of context updates and proposals (a prefill longer than the window, verify-sized
updates of 1..B rows picked from a verify-like output by their places, several requests
drafted together, an empty context, a released request whose store the next one reuses while
its last update was staged, not written) runs on every path: "growing" (the previous torch.cat store,
the reference), "ring" (the in-place ring, eager) and "static" (the functions the CUDA graphs
capture, run eagerly over the whole capacity under a length mask). The drafts must agree: same
chains and top-k ids, log-probs within float tolerance (only the summation order over context
rows differs once the ring wraps). Tiny random target and drafter, fp32, CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specscope.engine.cuda import dflash_graph  # noqa: E402
from specscope.engine.loader import TINY_CONFIG, random_model  # noqa: E402
from specscope.engine.speculative.dflash import DFlashDrafter  # noqa: E402
from specscope.engine.speculative.dflash_context import ring_rows  # noqa: E402
from specscope.engine.speculative.drafter import DraftRequest  # noqa: E402
from support.engine import tiny_dflash  # noqa: E402

pytestmark = pytest.mark.engine

BLOCK = 6


@pytest.fixture(scope="module")
def models():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    target = random_model(TINY_CONFIG, device="cpu", dtype=torch.float32, seed=3)
    yield target, tiny_dflash(target.config, block_size=BLOCK)
    torch.set_num_threads(threads)


def _script(seed: int) -> list[tuple]:
    """(op, request(s), rows or depth): prefills, verify-sized updates, proposals, releases."""
    rng = np.random.default_rng(seed)
    ops: list[tuple] = [("observe", "a", 9), ("observe", "b", 1), ("observe", "c", 0)]
    for step in range(30):
        if step == 12:
            ops += [("release", "b", 0), ("observe", "d", 14)]  # d reuses b's store
        live = ["a", "c"] + (["b"] if step < 12 else ["d"])
        batch = [live, ["a"], [live[-1]]][step % 3]  # together, then one at a time
        ops.append(("propose", batch, int(rng.integers(1, BLOCK))))
        for rid in live:
            ops.append(("observe", rid, int(rng.integers(1, BLOCK + 1))))
    return ops


def _run(drafter: DFlashDrafter, ops: list[tuple]) -> list:
    g = torch.Generator().manual_seed(0)
    width = drafter.model.fc.in_features
    hidden = {r: torch.randn(400, width, generator=g) for r in "abcd"}
    tokens = {r: torch.randint(0, TINY_CONFIG.vocab_size, (400,), generator=g) for r in "abcd"}
    seen = dict.fromkeys("abcd", 0)
    drafts = []
    for op, who, n in ops:
        if op == "observe":
            rows = hidden[who][seen[who] : seen[who] + n]
            if 0 < n <= BLOCK:  # a verify's accepted path: these rows among others
                drafter.observe(who, *_among_others(rows, g))
            else:
                drafter.observe(who, rows)
            seen[who] += n
        elif op == "release":
            drafter.release(who)
        else:
            reqs = [DraftRequest(r, tokens[r][: seen[r] + 1].tolist(), n) for r in who]
            drafts.append(drafter.propose(reqs))
    return drafts


def _among_others(rows: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, list[int]]:
    """A verify's output that holds `rows` (in order) at random places among rejected nodes'
    rows, and those places: what the stepper hands a drafter after a tree verify."""
    n = rows.shape[0]
    out = torch.randn(2 * n + 1, rows.shape[1], generator=g)
    places = sorted(torch.randperm(2 * n + 1, generator=g)[:n].tolist())
    out[places] = rows
    return out, places


@pytest.mark.parametrize("window", [None, 4, 7])
@pytest.mark.parametrize(
    "path", ["ring", "static", "static-1-slot", "static-narrow", "static-wide-verify"]
)
def test_static_paths_draft_like_the_growing_store(models, window, path, monkeypatch):
    target, model = models
    verify_rows = 0  # B: most updates come from a wider verify output, so they run eagerly
    if path == "static-wide-verify":  # every update of <= B rows is staged
        verify_rows, path = 2 * BLOCK + 1, "static"
    if path == "static-1-slot":  # stores past the graphs' slots take the eager path, mixed in
        monkeypatch.setattr(dflash_graph, "MAX_SLOTS", 1)
        path = "static"
    if path == "static-narrow":  # the block attends 4, 16, 64 ... rows as the context grows
        monkeypatch.setattr(dflash_graph, "FIRST_WIDTH", 4)
        path = "static"
    ops = _script(seed=window or 0)
    want = _run(
        DFlashDrafter(model, target.model, top_k=3, draft_window=window, path="growing"), ops
    )
    drafter = DFlashDrafter(
        model, target.model, top_k=3, draft_window=window, path=path, verify_rows=verify_rows
    )
    got = _run(drafter, ops)
    assert len(got) == len(want) == 30
    for step_got, step_want in zip(got, want, strict=True):
        for g, w in zip(step_got, step_want, strict=True):
            assert g.sequences == w.sequences
            np.testing.assert_array_equal(g.topk_tokens, w.topk_tokens)
            np.testing.assert_allclose(g.topk_logprobs, w.topk_logprobs, atol=1e-5)
    # Three requests live at the end, four seen: the released store was handed to "d".
    assert len(drafter.contexts) == 3 and drafter.contexts.get("d").slot == 1
    capacity = window or TINY_CONFIG.max_position_embeddings
    assert drafter.contexts.get("a").keys[0].shape[0] == capacity + 1  # + the scratch row


def test_a_step_launched_at_observe_drafts_like_one_run_at_propose(models):
    """One request (the graph path's serving case): a verify-sized update observed with the
    next propose's anchor starts that step at once, and the propose reads it. The drafts equal
    the growing store's, also where the propose's anchor is not the one launched (every third
    step: the step runs again) and after a launched request is released and its store reused;
    one replay a step where the anchor held, two where it did not."""
    target, model = models
    ref = DFlashDrafter(model, target.model, top_k=3, path="growing")
    got = DFlashDrafter(model, target.model, top_k=3, path="static", verify_rows=2 * BLOCK + 1)
    replays = []
    run_step = got.graphs._replay_step
    got.graphs._replay_step = lambda *a: replays.append(a) or run_step(*a)
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(300, model.fc.in_features, generator=g)
    tokens = torch.randint(0, TINY_CONFIG.vocab_size, (301,), generator=g).tolist()
    rng = np.random.default_rng(0)
    for rid in ("a", "b"):  # "b" reuses "a"'s store after a launched step was left unread
        for d in (ref, got):
            d.observe(rid, hidden[:9])
        seen, replays[:] = 9, []
        for step in range(18):
            n = int(rng.integers(1, BLOCK + 1))
            verify_out, places = _among_others(hidden[seen : seen + n], g)
            anchor = tokens[seen + n] + (step % 3 == 2)  # every third: not the next anchor
            for d in (ref, got):
                d.observe(rid, verify_out, places, anchor=anchor)
            seen += n
            req = [DraftRequest(rid, tokens[: seen + 1], BLOCK - 1)]
            want, drafted = ref.propose(req)[0], got.propose(req)[0]
            assert drafted.sequences == want.sequences
            np.testing.assert_array_equal(drafted.topk_tokens, want.topk_tokens)
            np.testing.assert_allclose(drafted.topk_logprobs, want.topk_logprobs, atol=1e-5)
        assert len(replays) == 18 + 6
        for d in (ref, got):
            d.observe(rid, *_among_others(hidden[seen : seen + 2], g), anchor=tokens[seen + 2])
            d.release(rid)
        assert got.graphs.launched is None and got.graphs.staged is None


def test_compiled_static_step_drafts_like_the_eager_one(models):
    """On CUDA the captured functions are fused by torch.compile first (whole, fullgraph: a
    graph break there would fail the capture on the GPU); here the same compiled functions run
    on the CPU's static path: the same drafts, and one compilation serves every store."""
    from torch._dynamo.utils import counters

    target, model = models
    ops = _script(seed=7)
    want = _run(DFlashDrafter(model, target.model, top_k=3, draft_window=7, path="static"), ops)
    counters.clear()
    drafter = DFlashDrafter(
        model, target.model, top_k=3, draft_window=7, path="static", compile=True
    )
    got = _run(drafter, ops)
    for step_got, step_want in zip(got, want, strict=True):
        for g, w in zip(step_got, step_want, strict=True):
            assert g.sequences == w.sequences
            np.testing.assert_array_equal(g.topk_tokens, w.topk_tokens)
            np.testing.assert_allclose(g.topk_logprobs, w.topk_logprobs, atol=1e-4)
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])  # block, update


def test_the_block_attends_the_narrowest_width_that_holds_the_context(models, monkeypatch):
    """A block reads the store's first `width` rows: the narrowest captured width that holds
    the visible rows, the whole ring once it wraps; compiled, one block per width used."""
    from torch._dynamo.utils import counters

    assert dflash_graph.widths(8192) == [512, 2048, 8192] and dflash_graph.widths(300) == [300]
    target, model = models
    monkeypatch.setattr(dflash_graph, "FIRST_WIDTH", 16)  # widths 16, 64, 256, 1024
    drafter = DFlashDrafter(model, target.model, top_k=3, path="static", compile=True)
    seen: list[int] = []
    widen = dflash_graph.width_for
    monkeypatch.setattr(dflash_graph, "width_for", lambda ctx: seen.append(widen(ctx)) or seen[-1])
    counters.clear()
    got = _run(drafter, _script(seed=7))
    want = _run(DFlashDrafter(model, target.model, top_k=3, path="growing"), _script(seed=7))
    for step_got, step_want in zip(got, want, strict=True):
        for g, w in zip(step_got, step_want, strict=True):
            np.testing.assert_array_equal(g.topk_tokens, w.topk_tokens)
            np.testing.assert_allclose(g.topk_logprobs, w.topk_logprobs, atol=1e-4)
    assert sorted(set(seen)) == [16, 64, 256], sorted(set(seen))
    assert counters["stats"]["unique_graphs"] == 1 + len(set(seen)), dict(counters["stats"])


def test_windowed_drafts_differ_from_unbounded(models):
    """The script reaches past the window, so the window is visible in the drafts (the
    equality above is not vacuous)."""
    target, model = models
    ops = _script(seed=0)
    full = _run(DFlashDrafter(model, target.model, top_k=3, path="static"), ops)
    windowed = _run(DFlashDrafter(model, target.model, top_k=3, draft_window=4, path="static"), ops)
    assert full[0][0].chain != windowed[0][0].chain or not np.allclose(
        full[-1][0].topk_logprobs, windowed[-1][0].topk_logprobs, atol=1e-3
    )


def test_ring_rows_send_padding_and_overwritten_rows_to_scratch():
    # capacity 4, 6 rows at positions 10..15 of which 5 are real: rows 0 (overwritten by row 4
    # in the same write) and 5 (padding) go to the scratch row 4.
    assert ring_rows(10, 5, 6, 4, "cpu").tolist() == [4, 3, 0, 1, 2, 4]
    assert ring_rows(torch.tensor(2), torch.tensor(0), 3, 8, "cpu").tolist() == [8, 8, 8]


def test_graph_path_needs_cuda_and_paths_are_named(models):
    target, model = models
    with pytest.raises(ValueError, match="CUDA device"):
        DFlashDrafter(model, target.model, path="graph")
    with pytest.raises(ValueError, match="path must be one of"):
        DFlashDrafter(model, target.model, path="fast")
