"""Paged KV cache bookkeeping, and the model's forward API that speculation builds on, with a
tiny random-weight model of the same architecture (fast; the real weights are tested in
test_engine_model.py)."""

from __future__ import annotations

import itertools

import pytest
import torch

from specscope.backend import BackendError
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import build_model
from specscope.engine.model import ForwardBatch, ModelConfig, NewTokens

pytestmark = pytest.mark.engine

TINY = ModelConfig(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    rope_theta=10000.0,
    max_position_embeddings=256,
    tie_word_embeddings=False,
)


def cache(num_pages=16, page_size=4, policy="contiguous", seed=0) -> KVCache:
    return KVCache(
        num_layers=TINY.num_layers,
        num_kv_heads=TINY.num_kv_heads,
        head_dim=TINY.head_dim,
        num_pages=num_pages,
        page_size=page_size,
        policy=policy,
        seed=seed,
    )


def test_contiguous_pages_are_adjacent_and_scattered_are_not():
    kv = cache(num_pages=64, page_size=1, policy="contiguous")
    seq = kv.admit("a", 40)
    slots = kv.alloc_slots(seq, 40)
    assert slots.tolist() == list(range(40))
    kv2 = cache(num_pages=64, page_size=1, policy="scattered", seed=3)
    seq2 = kv2.admit("a", 40)
    slots2 = kv2.alloc_slots(seq2, 40).tolist()
    assert len(set(slots2)) == 40
    assert sum(b == a + 1 for a, b in itertools.pairwise(slots2)) < 10


def test_slots_follow_the_page_table():
    kv = cache(num_pages=8, page_size=4, policy="scattered", seed=1)
    seq = kv.admit("a", 10)
    slots = kv.alloc_slots(seq, 10).tolist()
    assert len(seq.pages) == 3
    assert slots == [seq.pages[r // 4] * 4 + r % 4 for r in range(10)]


def test_admission_reserves_and_refuses_without_side_effects():
    kv = cache(num_pages=4, page_size=4)
    a = kv.admit("a", 12)  # 3 pages promised, none taken yet
    with pytest.raises(BackendError, match="KV pool exhausted") as err:
        kv.admit("b", 8)
    assert err.value.status == 503 and "b" not in kv.seqs
    kv.admit("c", 4)
    kv.alloc_slots(a, 12)
    with pytest.raises(BackendError):  # "a" may not eat "c"'s promised page
        kv.alloc_slots(a, 1)
    kv.release("a")
    kv.release("a")
    assert kv.free_pages == 4
    kv.admit("b", 8)


def test_truncate_frees_pages_and_move_rows_copies_all_layers():
    kv = cache(num_pages=8, page_size=2)
    seq = kv.admit("a", 16)
    slots = kv.alloc_slots(seq, 7)
    kv.k[:, slots] = torch.arange(7, dtype=torch.float32)[None, :, None, None]
    kv.move_rows(slots[[4, 6]].tolist(), slots[[1, 2]].tolist())
    assert kv.k[1, slots[[1, 2]], 0, 0].tolist() == [4.0, 6.0]
    kv.truncate(seq, 3)
    assert len(seq.pages) == 2 and seq.num_rows == 3 and kv.free_pages == 6


@pytest.fixture(scope="module")
def tiny_model():
    return build_model(TINY, None, "cpu", torch.float32, seed=0)


def run(model, kv, seq, tokens, positions, mask=None):
    slots = kv.alloc_slots(seq, len(tokens))
    batch = ForwardBatch.pack(
        [NewTokens(tokens, positions, slots, kv.context_slots(seq), mask)], "cpu", kv.pad_slot
    )
    return model(batch, kv)[0], slots


def test_tree_mask_equals_running_each_branch_alone(tiny_model):
    """Tree verification API: root r, children a and b (both depth 1), a's child c (depth 2).
    With the tree mask, every node's logits equal a plain causal run of its own path."""
    prompt = [5, 9, 11, 2]
    kv = cache(num_pages=64, page_size=1, policy="scattered")
    seq = kv.admit("t", 64)
    _, slots = run(tiny_model, kv, seq, prompt, list(range(4)))
    kv.commit(seq, len(slots))
    r, a, b, c = 7, 13, 17, 19
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    tree_logits, _ = run(tiny_model, kv, seq, [r, a, b, c], [4, 5, 5, 6], mask)

    def path_logits(path):
        kv2 = cache(num_pages=32, page_size=4)
        s2 = kv2.admit("p", 16)
        logits, _ = run(tiny_model, kv2, s2, prompt + path, list(range(4 + len(path))))
        return logits[4:]

    torch.testing.assert_close(tree_logits[[0, 1, 3]], path_logits([r, a, c]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tree_logits[2], path_logits([r, b])[1], rtol=1e-5, atol=1e-5)


def test_padded_batch_does_not_touch_other_requests(tiny_model):
    kv = cache(num_pages=32, page_size=2)
    s1, s2 = kv.admit("a", 20), kv.admit("b", 20)
    w1, w2 = kv.alloc_slots(s1, 5), kv.alloc_slots(s2, 2)
    batch = ForwardBatch.pack(
        [
            NewTokens([1, 2, 3, 4, 5], list(range(5)), w1, kv.context_slots(s1)),
            NewTokens([6, 7], [0, 1], w2, kv.context_slots(s2)),
        ],
        "cpu",
        kv.pad_slot,
    )
    logits = tiny_model(batch, kv)
    alone_kv = cache(num_pages=32, page_size=2)
    s3 = alone_kv.admit("b", 20)
    alone, _ = run(tiny_model, alone_kv, s3, [6, 7], [0, 1])
    torch.testing.assert_close(logits[1, :2], alone, rtol=1e-5, atol=1e-5)
    used = set(w1.tolist()) | set(w2.tolist()) | {kv.pad_slot}
    untouched = [s for s in range(kv.pad_slot) if s not in used]
    assert kv.k[:, untouched].abs().sum() == 0


def test_device_block_table_mirrors_every_page_change():
    """The fixed-shape page table a captured attention kernel reads: after each sync it equals
    every request's page list, through growth, truncation (rejected drafts) and reordering."""
    kv = cache(num_pages=64, page_size=1, policy="scattered", seed=3)
    table = kv.enable_device_table(max_seqs=2, max_pages=40)

    def check():
        kv.sync_device_table(list(kv.seqs.values()))
        for seq in kv.seqs.values():
            assert seq.table_row > 0
            assert table.table[seq.table_row, : len(seq.pages)].tolist() == seq.pages

    a, b = kv.admit("a", 30), kv.admit("b", 30)
    assert {a.table_row, b.table_row} == {1, 2}
    kv.alloc_rows(a, 10)
    kv.commit(a, 10)
    kv.alloc_rows(b, 4)
    check()
    kv.alloc_rows(a, 5)  # a verify's pending rows
    check()
    kv.reorder_rows(a, 10, [2, 4])  # accepted nodes 2 and 4 become rows 10, 11
    kv.commit(a, 2)
    kv.truncate(a, 12)
    check()
    kv.alloc_rows(a, 3)
    check()
    kv.release("b")
    c = kv.admit("c", 8)
    assert c.table_row == b.table_row  # rows are reused
    kv.alloc_rows(c, 8)
    check()
    with pytest.raises(BackendError):
        kv.admit("d", 4)  # both table rows taken


def test_commit_never_passes_the_allocated_rows():
    kv = cache()
    seq = kv.admit("a", 8)
    kv.alloc_rows(seq, 3)
    kv.commit(seq, 2)
    with pytest.raises(ValueError):
        kv.commit(seq, 2)
    assert kv.context_slots(seq).tolist() == kv.slot_ids(seq, 0, 2)


def min_scan_page(kv: KVCache, seq) -> int:
    """What the contiguous policy promises (and first did by scanning the free list): the page
    after the request's last one when free, else the lowest free page."""
    free = set(kv._free)
    after = seq.pages[-1] + 1 if seq.pages else None
    return after if after in free else min(free)


@pytest.mark.parametrize("page_size", [1, 4])
def test_contiguous_hands_out_what_a_scan_of_the_free_list_would(page_size):
    """The free list's lowest-page heap (stale entries, rebuilds) picks exactly the page a scan
    picks, through interleaved growth, truncation and release of many requests."""
    kv = cache(num_pages=96, page_size=page_size)
    rng = __import__("random").Random(7)
    live: list[str] = []
    for i in range(600):
        op = rng.random()
        if op < 0.15 and len(live) < 8:
            rid = f"r{i}"
            kv.admit(rid, 10 * page_size)
            live.append(rid)
        elif op < 0.25 and live:
            kv.release(live.pop(rng.randrange(len(live))))
        elif live:
            seq = kv.seqs[rng.choice(live)]
            if rng.random() < 0.2 and seq.num_rows:
                kv.truncate(seq, rng.randrange(seq.num_rows))
            elif len(seq.pages) < seq.reserved_pages or seq.num_rows % page_size:
                pages_before = len(seq.pages)
                expected = min_scan_page(kv, seq) if seq.num_rows % page_size == 0 else None
                kv.alloc_rows(seq, 1)
                if expected is not None:
                    assert len(seq.pages) == pages_before + 1 and seq.pages[-1] == expected
            seq.context_len = seq.num_rows
            assert kv.context_slots(seq).tolist() == kv.slot_ids(seq, 0, seq.num_rows)
    assert kv.free_pages + sum(len(s.pages) for s in kv.seqs.values()) == kv.num_pages
    assert len(kv._lowest) <= 2 * kv.num_pages
