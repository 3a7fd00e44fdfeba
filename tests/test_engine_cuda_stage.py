"""The graph runner's decode staging (whole columns at once) writes the same staging block and
allocates the same KV rows as its general per-request path, through page-boundary crossings,
explicit positions and both allocation policies. Host-side numpy only, but the module imports
Triton (the attention kernel), so it runs where Triton is installed (the GPU machines)."""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("triton")

from specscope.engine.cuda.graph_runner import CudaGraphRunner, PackedInputs
from specscope.engine.kv_cache import KVCache
from specscope.engine.runner import Work

pytestmark = pytest.mark.engine


def host_side(policy: str) -> tuple[CudaGraphRunner, list]:
    """A runner with only its host-side staging state (no device, no graphs) and 20 requests
    of different context lengths on a pool of page size 4."""
    kv = KVCache(
        num_layers=1, num_kv_heads=1, head_dim=2, num_pages=400, page_size=4, policy=policy, seed=5
    )
    kv.enable_device_table(40, 100)
    runner = CudaGraphRunner.__new__(CudaGraphRunner)
    runner.kv, runner._layout = kv, {1: PackedInputs.for_nodes(1)}
    runner._pad = {1: runner._pad_row(1)}
    seqs = []
    for i in range(20):
        seq = kv.admit(f"r{i}", 70)
        kv.alloc_rows(seq, 7 + i)
        kv.commit(seq, 7 + i)
        seqs.append(seq)
    return runner, seqs


@pytest.mark.parametrize("policy", ["contiguous", "scattered"])
def test_decode_staging_equals_the_general_path(policy):
    general, seqs_g = host_side(policy)
    decode, seqs_d = host_side(policy)
    lo, rng = general._layout[1], random.Random(1)
    for _ in range(30):
        n = rng.randrange(1, 21)
        tokens = [rng.randrange(100) for _ in range(n)]
        positions = [None if rng.random() < 0.7 else [rng.randrange(500)] for _ in range(n)]
        blocks = []
        for runner, seqs, stage in (
            (general, seqs_g, general._stage),
            (decode, seqs_d, decode._stage_decode),
        ):
            staging = np.tile(runner._pad[1], (32, 1))
            work = [Work(seqs[i], [tokens[i]], positions[i]) for i in range(n)]
            slots = stage(work, staging, lo)
            for w in work:
                runner.kv.commit(w.seq, 1)
            blocks.append((staging, slots))
        assert np.array_equal(blocks[0][0], blocks[1][0])
        assert blocks[0][1] == blocks[1][1]
