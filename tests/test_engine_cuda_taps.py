"""The CUDA fast path hands a hidden-state drafter (DFlash) the target's tapped layer outputs
(runs where a CUDA device is present: the GPU check; CPU runs skip this module).

The captured step's taps equal the eager forward's (decode, a causal chain, a tree mask), and
DFlash speculation on the fast path (graphs chosen, not the eager fallback) gives exactly plain
greedy output in fp32, chain and DDTree, so the drafter's verify steps no longer need the eager
runner; the drafter's own batch-1 step runs on its CUDA graphs there (engine/cuda/dflash_graph.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (CUDA graphs, Triton kernel)", allow_module_level=True)
pytest.importorskip("triton")

from specscope.backend import SamplingParams  # noqa: E402
from specscope.engine.cuda.graph_runner import CudaGraphRunner  # noqa: E402
from specscope.engine.factory import assemble  # noqa: E402
from specscope.engine.kv_cache import KVCache  # noqa: E402
from specscope.engine.loader import TINY_CONFIG, random_model  # noqa: E402
from specscope.engine.options import EngineOptions  # noqa: E402
from specscope.engine.runner import EagerRunner, Work  # noqa: E402
from specscope.engine.speculative import dflash_model  # noqa: E402
from support.engine import run_to_end, tiny_dflash  # noqa: E402

pytestmark = pytest.mark.engine

CONFIG = dataclasses.replace(TINY_CONFIG, num_layers=4)
TAPS = (0, 2)
PROMPTS = [
    [5, 17, 23, 42, 8, 5, 17, 23, 42, 8, 5, 17, 23],
    [61, 3, 3, 70, 61, 3, 3, 70, 61, 3],
    [11],
]
GREEDY = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny():
    return random_model(CONFIG, device="cuda", dtype=torch.float32, seed=3)


def _cache(loaded) -> KVCache:
    return KVCache.for_model(
        loaded.config, pool_tokens=2048, page_size=16, dtype=torch.float32, device=loaded.device
    )


@pytest.mark.parametrize("new", ["decode", "chain", "tree"])
def test_captured_taps_equal_the_eager_forward(tiny, new):
    kv = _cache(tiny)
    graphs = CudaGraphRunner(tiny.model, kv, max_batch=2, max_nodes=5, compile=False, taps=TAPS)
    eager = EagerRunner(tiny.model, kv)
    seqs = [kv.admit(f"s{i}", 64) for i in range(2)]
    for seq, prompt in zip(seqs, PROMPTS[:2], strict=True):
        eager.forward([Work(seq, prompt)], want_logits=False)
        kv.commit(seq, len(prompt))
    q = 1 if new == "decode" else 5
    mask = None
    if new == "tree":  # root, two children of the root, a grandchild under each
        mask = np.zeros((q, q), dtype=bool)
        for child, parent in [(1, 0), (2, 0), (3, 1), (4, 2)]:
            mask[child] = mask[parent]
            mask[child, parent] = True
    positions = [0, 1, 1, 2, 2] if new == "tree" else list(range(q))
    results = []
    for runner in (graphs, eager):
        work = [
            Work(s, [7, 9, 11, 13, 15][:q], [s.context_len + p for p in positions[:q]], mask)
            for s in seqs
        ]
        _, logits, hidden = runner.forward_hidden(work, TAPS)
        results.append(([h.clone() for h in hidden], logits.tensor[:, :q].clone()))
        for w in work:
            kv.truncate(w.seq, w.seq.context_len)
    (h_graph, l_graph), (h_eager, l_eager) = results
    for a, b in zip(h_graph, h_eager, strict=True):
        assert a.shape == (q, len(TAPS) * CONFIG.hidden_size)
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(l_graph, l_eager, atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def drafter_dir(tiny, tmp_path_factory):
    model = tiny_dflash(tiny.config, target_layer_ids=TAPS)
    return dflash_model.save(model, tmp_path_factory.mktemp("dflash"), dtype=torch.float32)


def _backend(loaded, **spec):
    opts = EngineOptions.from_flags(
        device="cuda", page_size=16, max_batch=4, torch_compile=False, **spec
    )
    return assemble(loaded, _cache(loaded), opts)


@pytest.mark.parametrize(
    "spec",
    [
        {"verify": "chain", "num_draft_tokens": 5},
        {"verify": "tree", "num_draft_tokens": 5, "budget": 16},
    ],
    ids=["chain", "tree"],
)
def test_dflash_on_the_fast_path_is_lossless(tiny, drafter_dir, spec):
    reference, _ = run_to_end(_backend(tiny), PROMPTS, GREEDY)
    backend = _backend(tiny, drafter=f"dflash:{drafter_dir}", **spec)
    assert isinstance(backend.runner, CudaGraphRunner) and backend.runner.taps == TAPS
    assert backend.stepper.drafter.path == "graph"  # the drafter's own step captured too
    tokens, steps = run_to_end(backend, PROMPTS, GREEDY)
    assert tokens == reference
    assert any(o.proposed_drafts > 0 for s in steps for o in s.outputs)
