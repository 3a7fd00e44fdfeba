"""train_dflash on a tiny random target (CPU, seconds): the loss falls, the drafter and its card
are written, the saved drafter loads through `--drafter dflash:PATH` and decodes losslessly,
the same seed gives the same weights, and bad arguments exit 2 with one line. The batched step
equals the first trainer's per-sequence one, a run stopped and resumed equals an uninterrupted
one, checkpoints split into parts and generation continues from its last shard; sampled responses
(--response-temperature) are seeded per prompt and cached apart from greedy ones."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402

from specscope.engine.loader import TINY_CONFIG, random_model  # noqa: E402
from specscope.engine.speculative import dflash_model  # noqa: E402
from specscope.engine.speculative.dflash_model import DFlashConfig, DFlashDraftModel  # noqa: E402
from specscope.engine.training import (  # noqa: E402
    batch,
    checkpoint,
    cli,
    dataset,
    loop,
    loss,
    pipeline,
    prompts,
    target,
)
from specscope.engine.training import card as card_mod  # noqa: E402

pytestmark = pytest.mark.engine

PROMPTS = [
    ("code-completion", [5, 17, 23, 42, 8, 5, 17, 23]),
    ("chat", [61, 3, 3, 70, 61, 3]),
    ("code-completion", [11, 12, 13, 14, 15]),
    ("chat", [40, 2, 90, 33, 7, 21, 64]),
]
EVAL = [("code-completion", [9, 8, 7, 6, 5]), ("chat", [30, 31, 32, 30, 31])]


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model = random_model(TINY_CONFIG, device="cpu", dtype=torch.float32, seed=5)
    # N(0, 0.02) weights make near-uniform logits through a 32-wide head, which no drafter can
    # sharpen through the shared (frozen) head: scale it so the target has real preferences.
    with torch.no_grad():
        model.model.lm_head.weight.mul_(40)
    yield model
    torch.set_num_threads(threads)


def _args(out, cache, seed=0, *extra):
    return cli.parse_args(
        [
            "--out",
            str(out),
            "--cache-dir",
            str(cache),
            "--steps",
            "60",
            "--seed",
            str(seed),
            "--draft-layers",
            "1",
            "--block-size",
            "5",
            "--gamma",
            "4",
            "--response-tokens",
            "40",
            "--anchors",
            "8",
            "--lr",
            "0.003",
            "--eval-tokens",
            "24",
            "--eval-budget",
            "8",
            "--save-dtype",
            "float32",
            *extra,
        ]
    )


def test_training_runs_writes_and_reloads(tiny, tmp_path):
    logs: list[str] = []
    card = pipeline.run(_args(tmp_path / "d", tmp_path / "c"), tiny, PROMPTS, EVAL, logs.append)
    curve = [p["loss"] for p in card["training"]["curve"]]
    assert card["training"]["steps"] == 60 and len(curve) == 6
    # Held-out loss at ten points of the run, on the evaluation prompts' own sequences.
    held = card["training"]["validation"]
    assert [v["step"] for v in held] == list(range(6, 61, 6))
    assert all(v["loss"] > 0 and 1.0 <= v["tau_sim"] <= 5 for v in held)
    # tau_sim is what the per-slot held-out accuracy implies, per point
    for v in held:
        assert v["tau_sim"] == pytest.approx(
            loss.expected_commit(np.array(v["slot_acc"])), abs=2e-3
        )
        assert set(v["tau_sim_by_category"]) == {"code-completion", "chat"}
    assert np.mean(curve[-2:]) < 0.8 * curve[0]
    out = tmp_path / "d"
    for name in ("config.json", "model.safetensors", "card.json", "DATA_CARD.md"):
        assert (out / name).is_file()
    saved = json.loads((out / "card.json").read_text())
    assert saved["data"]["sequences"] == len(PROMPTS) and saved["data"]["cached"] is False
    assert saved["target_dtype"] == "float32"  # lossless means bitwise here: no rounding note
    assert "rounding" not in (out / "DATA_CARD.md").read_text()
    (tmp_path / "bf16").mkdir()
    card_mod.write_card(tmp_path / "bf16", {**saved, "target_dtype": "bfloat16"})
    assert "rounding can pick another argmax" in (tmp_path / "bf16" / "DATA_CARD.md").read_text()
    assert saved["corpus"] is None and saved["eval_sets"] is None
    text = (out / "DATA_CARD.md").read_text()
    assert "the shipped workload categories" in text and "held-out prompts: seeds 1000+" in text
    # A corpus run's card names the corpus and the held-out files, not the categories' seeds.
    (tmp_path / "corpus").mkdir()
    corpus_run = {**saved, "corpus": "c.jsonl.gz", "eval_sets": ["code.jsonl", "chat.jsonl"]}
    card_mod.write_card(tmp_path / "corpus", corpus_run)
    text = (tmp_path / "corpus" / "DATA_CARD.md").read_text()
    assert "the training split of the corpus `c.jsonl.gz`" in text and "seeds 0.." not in text
    assert "held-out prompts: the held-out sets code.jsonl, chat.jsonl" in text
    assert "Trained on from" not in text  # no --init-from: no lineage
    assert set(saved["evaluation"]) == {"code-completion", "chat"}
    for row in saved["evaluation"].values():
        assert row["lossless_chain"] and row["lossless_tree"]
        assert row["tau_chain"] >= 1.0 and row["tau_tree"] >= 1.0
    # The drafter learnt the target's (repetitive) greedy text: it drafts better than nothing.
    assert max(r["tau_tree"] for r in saved["evaluation"].values()) > 1.2
    assert "| step | loss |" in (out / "DATA_CARD.md").read_text()
    assert "| step | held-out loss |" in (out / "DATA_CARD.md").read_text()
    # Only the drafter's own tensors are stored: no embedding or LM head.
    names = set(load_file(str(out / "model.safetensors")))
    assert not any("embed_tokens" in n or "lm_head" in n for n in names) and "fc.weight" in names
    assert dflash_model.load(out).config.block_size == 5
    # The card's command is a command: its flags parse back to the same settings.
    words = saved["command"].split()[3:]
    again_args = cli.parse_args(words)
    assert (
        again_args.block_size == 5
        and again_args.eager is False
        and again_args.evaluate_only is False
    )

    # --evaluate-only re-measures the drafter in --out (another device, the fast path) and
    # updates its card, without training again.
    before = (out / "model.safetensors").read_bytes()
    args = _args(out, tmp_path / "c")
    args.evaluate_only, args.eval_tokens = True, 16
    card2 = pipeline.run(args, tiny, PROMPTS, EVAL, logs.append)
    assert (out / "model.safetensors").read_bytes() == before
    assert card2["eval_tokens"] == 16 and set(card2["evaluation"]) == {"code-completion", "chat"}
    assert all(r["tokens"] <= 16 * r["prompts"] for r in card2["evaluation"].values())
    assert "--evaluate-only" in card2["notes"][-1]
    assert json.loads((out / "card.json").read_text())["eval_tokens"] == 16

    # Same seed and steps: same weights; the data comes from the cache the first run wrote.
    again = pipeline.run(_args(tmp_path / "e", tmp_path / "c"), tiny, PROMPTS, [], logs.append)
    assert again["data"]["cached"] is True
    a, b = (
        load_file(str(out / "model.safetensors")),
        load_file(str(tmp_path / "e" / "model.safetensors")),
    )
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_repeated_prompts_are_trained_once_and_never_evaluated():
    train = [("chat", [1, 2, 3]), ("chat", [1, 2, 3]), ("code-edit", [4, 5])]
    held = [("chat", [1, 2, 3]), ("chat", [7, 8]), ("chat", [7, 8])]
    kept, unseen, stats = prompts.distinct_split(train, held)
    assert kept == [("chat", [1, 2, 3]), ("code-edit", [4, 5])] and unseen == [("chat", [7, 8])]
    assert stats == {
        "prompts_rendered": 3,
        "prompts_distinct": 2,
        "eval_rendered": 3,
        "eval_unseen": 1,
    }


def test_small_categories_give_distinct_prompts_and_evaluation_avoids_training():
    # summarisation has 5 articles: seeds 0..4 render them as the workload does, later seeds
    # re-cut a repeat at another offset of the same text (was: 5 distinct prompts of 12).
    train = prompts.category_texts(["summarisation", "multi-turn"], 12, 0, 1200)
    texts = [t for _, t in train]
    assert len(set(texts)) == len(texts) == 24
    from specscope.probe.workloads.categories import CATEGORIES

    assert texts[0] == prompts._render(CATEGORIES["summarisation"](0), 1200)  # unchanged
    held = prompts.category_texts(
        ["summarisation", "multi-turn"],
        4,
        prompts.EVAL_SEED_OFFSET,
        1200,
        avoid=frozenset(texts),
    )
    assert len(held) == 8 and not {t for _, t in held} & set(texts)
    assert all(len(t) <= 1200 + 400 for _, t in train + held)  # the cut still bounds a prompt


def test_anchors_leave_a_full_block_and_weights_decay():
    sample = dataset.Sample("x", list(range(30)), 10, torch.zeros(30, 4))
    rng = np.random.default_rng(0)
    for _ in range(20):
        anchors = loss.sample_anchors(sample, 8, 16, rng)
        assert len(set(anchors.tolist())) == len(anchors) == 14  # positions 9..22
        assert anchors.min() >= 9 and anchors.max() + 7 <= 29 and np.all(np.diff(anchors) > 0)
    w = loss.position_weights(8, 4.0)
    assert w[0] == 1.0 and torch.all(w[1:] < w[:-1]) and len(w) == 7
    assert loss.expected_commit(np.array([1.0, 1.0, 0.0])) == 3.0


def test_bad_arguments_exit_2(capsys, tmp_path):
    assert (
        cli.main(
            [
                "--out",
                str(tmp_path),
                "--categories",
                "poetry",
                "--target",
                str(tmp_path / "missing.gguf"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("train_dflash:")


@pytest.mark.parametrize("per_row", [1, 3, 16])
def test_batched_step_equals_the_per_sequence_loss(tiny, per_row):
    # The trainer's step (every block of every sequence in one batch, `per_row` blocks a row,
    # chunked head + CE) against the first trainer's packed per-sequence loss: same loss,
    # accuracy and gradients.
    cfg = DFlashConfig.for_target("t", tiny.config, num_layers=2, block_size=5)
    draft = DFlashDraftModel(cfg)
    draft.init_weights(0, 0.5)
    width = len(cfg.target_layer_ids) * tiny.config.hidden_size
    rng = np.random.default_rng(0)
    samples = [
        dataset.Sample("x", rng.integers(0, 97, n).tolist(), p, torch.randn(n, width).bfloat16())
        for n, p in [(30, 10), (45, 5), (22, 12)]
    ]
    anchors = [loss.sample_anchors(s, 5, 8, rng) for s in samples]
    embed, head = tiny.model.embed_tokens, tiny.model.lm_head
    ref_loss, ref_acc = 0.0, []
    for s, a in zip(samples, anchors, strict=True):
        part, acc = loss.block_loss(draft, embed, head, s, a, 4.0)
        (part / len(samples)).backward()
        ref_loss += float(part.detach()) / len(samples)
        ref_acc.append(acc)
    ref_grads = {k: p.grad.clone() for k, p in draft.named_parameters()}
    draft.zero_grad()
    length = batch.context_length(anchors)
    feats = dataset.step_features(tiny, tuple(cfg.target_layer_ids), samples, length)
    step = batch.pack(samples, anchors, feats, torch.device("cpu"), blocks_per_row=per_row)
    got, acc = loss.batch_loss(draft, embed, draft.draft_head(head.weight), step, 4.0)
    got.backward()
    assert float(got.detach()) == pytest.approx(ref_loss, rel=1e-5)
    assert torch.allclose(acc, torch.stack(ref_acc))
    for k, p in draft.named_parameters():
        assert torch.allclose(p.grad, ref_grads[k], rtol=1e-4, atol=1e-6), k
    assert step.label_slots(5) == sum(map(len, anchors)) * 4


def test_the_attention_setting_changes_kernels_not_the_loss(tiny, monkeypatch):
    # --attention no-cudnn (speed only: cuDNN builds a plan per shape) trains the same step,
    # with cuDNN's attention switched off while the drafter's forward runs (and on again after)
    seen: list[bool] = []
    forward = loop._drafter_loss

    def watched(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return forward(*args, **kwargs)

    monkeypatch.setattr(loop, "_drafter_loss", watched)
    cfg = DFlashConfig.for_target("t", tiny.config, num_layers=1, block_size=5)
    draft = DFlashDraftModel(cfg)
    draft.init_weights(0, 0.5)
    rng = np.random.default_rng(1)
    samples = [dataset.Sample("x", rng.integers(0, 97, n).tolist(), 6) for n in (30, 41)]
    anchors = [loss.sample_anchors(s, 5, 8, rng) for s in samples]
    got = {}
    for mode in sorted(loop.ATTENTION):
        draft.zero_grad()
        value, _, slots = loop.step_loss(draft, tiny, samples, anchors, 4.0, attention=mode)
        value.backward()
        got[mode] = (float(value.detach()), [p.grad.clone() for p in draft.parameters()], slots)
    (a, ga, na), (b, gb, nb) = got["auto"], got["no-cudnn"]
    assert a == pytest.approx(b, rel=1e-6) and na == nb
    assert all(torch.allclose(x, y, rtol=1e-5, atol=1e-7) for x, y in zip(ga, gb, strict=True))
    assert seen == [True, False] and torch.backends.cuda.cudnn_sdp_enabled()  # auto, no-cudnn
    assert cli.parse_args(["--out", "x", "--attention", "no-cudnn"]).attention == "no-cudnn"


def test_a_one_token_vocabulary_scores_exactly_the_labels_that_are_that_token(tiny):
    # Over a vocabulary of one token the softmax is certain (loss 0) and the argmax is always
    # that token: a slot is right exactly where its label is it, and a label outside the
    # vocabulary is a miss, never a hit of draft index 0.
    cfg = DFlashConfig.for_target("t", tiny.config, num_layers=1, block_size=5)
    draft = DFlashDraftModel(replace(cfg, draft_vocab_size=1))
    draft.init_weights(0, 0.5)
    rng = np.random.default_rng(1)
    width = len(cfg.target_layer_ids) * tiny.config.hidden_size
    samples = [
        dataset.Sample("x", rng.integers(0, 6, n).tolist(), p, torch.randn(n, width))
        for n, p in [(40, 8), (30, 6)]
    ]
    anchors = [loss.sample_anchors(s, 5, 10, rng) for s in samples]
    feats = dataset.step_features(tiny, tuple(cfg.target_layer_ids), samples, 40)
    step = batch.pack(samples, anchors, feats, torch.device("cpu"))
    for token in (3, 50):  # one that the labels hold, one they never do
        draft.draft_vocab.fill_(token)
        head = draft.draft_head(tiny.model.lm_head.weight)
        got, acc = loss.batch_loss(draft, tiny.model.embed_tokens, head, step, 4.0)
        assert float(got.detach()) == 0.0
        want = [
            [np.mean([s.tokens[a + k] == token for a in anc]) for k in range(1, 5)]
            for s, anc in zip(samples, anchors, strict=True)
        ]
        np.testing.assert_allclose(acc.numpy(), want)


def test_a_draft_vocabulary_is_the_most_frequent_response_tokens(tiny, tmp_path):
    logs: list[str] = []
    out = tmp_path / "v"
    args = _args(out, tmp_path / "c", 0, "--draft-vocab", "9")
    card = pipeline.run(args, tiny, PROMPTS, EVAL, logs.append)
    responses, _ = target.generate(tiny, [p for _, p in PROMPTS], 40, batch=4)
    counts = np.bincount(np.concatenate(responses), minlength=tiny.config.vocab_size)
    order = sorted(range(len(counts)), key=lambda t: (-counts[t], t))[:9]
    saved = dflash_model.load(out)
    assert saved.config.draft_vocab_size == 9 and saved.draft_vocab.tolist() == sorted(order)
    rec = card["draft_vocab"]
    assert rec["size"] == 9 and rec["counted_from"] == "training responses"
    assert rec["coverage_counted"] == pytest.approx(counts[order].sum() / counts.sum(), abs=1e-4)
    assert 0 < rec["coverage_held_out_responses"] <= 1
    assert "draft vocabulary: 9 tokens" in (out / "DATA_CARD.md").read_text()
    for row in card["evaluation"].values():  # served from its vocabulary, still lossless
        assert row["lossless_chain"] and row["lossless_tree"]

    # --draft-vocab-only restricts a trained drafter from the training prompts (here the token
    # prompts given to run; with --corpus its train split), its weights and their dtype as saved
    restrict = _args(out, tmp_path / "c", 0, "--draft-vocab", "2", "--draft-vocab-only")
    before = load_file(str(out / "model.safetensors"))
    rec = pipeline.run(restrict, tiny, PROMPTS, EVAL, logs.append)
    prompt_counts = np.bincount(np.concatenate([p for _, p in PROMPTS]))
    top2 = sorted(sorted(range(len(prompt_counts)), key=lambda t: (-prompt_counts[t], t))[:2])
    assert rec["size"] == 2 and rec["counted_tokens"] == prompt_counts.sum()
    # its coverage of the target's own greedy responses to the held-out prompts
    held, _ = target.generate(tiny, [p for _, p in EVAL], 24, batch=2)
    held_counts = np.bincount(np.concatenate(held), minlength=tiny.config.vocab_size)
    want = held_counts[top2].sum() / held_counts.sum()
    assert rec["coverage_held_out_responses"] == pytest.approx(want, abs=1e-4)
    after = load_file(str(out / "model.safetensors"))
    assert after["draft_vocab"].tolist() == top2
    assert all(torch.equal(before[k], after[k]) for k in before if k != "draft_vocab")
    assert json.loads((out / "config.json").read_text())["draft_vocab_size"] == 2
    assert "--draft-vocab-only" in json.loads((out / "card.json").read_text())["notes"][-1]


def test_batched_features_and_refilled_generation_equal_one_at_a_time(tiny):
    seqs = [[5, 17, 23, 42, 8, 5, 17, 23, 9, 1], [61, 3, 3], [11, 12, 13, 14, 15, 16]]
    together = target.batch_features(tiny, seqs, (0, 2), chunk=4)
    for i, s in enumerate(seqs):
        alone = target.batch_features(tiny, [s], (0, 2))
        assert torch.allclose(together[i, : len(s)], alone[0], atol=1e-5)
        assert not together[i, len(s) :].any()
    ids = [p for _, p in PROMPTS + EVAL]
    batched, _ = target.generate(tiny, ids, 12, batch=2)  # slots refilled as requests finish
    assert batched == [target.generate(tiny, [p], 12, batch=1)[0][0] for p in ids]


def test_generation_stops_after_a_shard_and_continues(tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(dataset, "SHARD_BYTES", 1)  # one prompt a shard
    straight, _, _ = dataset.generate_samples(tiny, PROMPTS, 16, 8, None)
    for done in (1, 2, 3):
        with pytest.raises(checkpoint.Stopped, match=f"{done} of 4 prompts"):
            dataset.generate_samples(tiny, PROMPTS, 16, 8, tmp_path, stop_at=0.0)
    resumed, _, cached = dataset.generate_samples(tiny, PROMPTS, 16, 8, tmp_path, stop_at=0.0)
    assert [s.tokens for s in resumed] == [s.tokens for s in straight] and not cached
    again, _, cached = dataset.generate_samples(tiny, PROMPTS, 16, 8, tmp_path)
    assert cached and [(s.category, s.prompt_len) for s in again] == [
        (s.category, s.prompt_len) for s in straight
    ]


@pytest.mark.parametrize("vocab", [[], ["--draft-vocab", "9"]], ids=["whole", "draft-vocab"])
def test_stopped_and_resumed_run_equals_an_uninterrupted_one(tiny, tmp_path, vocab):
    # (with a draft vocabulary its ids travel in the checkpoint and the exported drafter too)
    logs: list[str] = []
    straight = pipeline.run(
        _args(tmp_path / "a", tmp_path / "c", 0, *vocab), tiny, PROMPTS, EVAL, logs.append
    )
    out = tmp_path / "b"
    # One command line repeated: --resume starts the run where no checkpoint is there yet, and
    # a passed deadline stops it after one step, with a checkpoint.
    for done in (1, 2):
        args = _args(out, tmp_path / "c", 0, *vocab, "--resume", "--stop-after-minutes", "0")
        with pytest.raises(checkpoint.Stopped, match=f"step {done} of 60"):
            pipeline.run(args, tiny, PROMPTS, EVAL, logs.append)
    resumed = pipeline.run(
        _args(out, tmp_path / "c", 0, *vocab, "--resume"), tiny, PROMPTS, EVAL, logs.append
    )
    a = load_file(str(tmp_path / "a" / "model.safetensors"))
    b = load_file(str(out / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a) and ("draft_vocab" in a) == bool(vocab)
    for key in ("curve", "validation"):
        drop = ("elapsed_s", "tokens_per_s")
        strip = [{k: v for k, v in p.items() if k not in drop} for p in straight["training"][key]]
        assert strip == [
            {k: v for k, v in p.items() if k not in drop} for p in resumed["training"][key]
        ]
    assert resumed["training"]["slot_accuracy_last"] == straight["training"]["slot_accuracy_last"]
    assert "--resume" not in resumed["command"] and "--stop-after" not in resumed["command"]
    # The checkpoint's parts alone (e.g. brought back from the GPU machine) give the drafter.
    shutil.copytree(out / "checkpoint", tmp_path / "x" / "checkpoint")
    assert (
        cli.main(["--out", str(tmp_path / "x"), "--export-checkpoint", "--save-dtype", "float32"])
        == 0
    )
    c = load_file(str(tmp_path / "x" / "model.safetensors"))
    assert set(c) == set(a) and all(torch.equal(a[k], c[k]) for k in a)
    assert dflash_model.load(tmp_path / "x").config.training["steps"] == 60
    # Other settings than the checkpoint's: one error that names them.
    with pytest.raises(ValueError, match=r"settings\.lr"):
        pipeline.run(
            _args(out, tmp_path / "c", 0, *vocab, "--resume", "--lr", "0.001"),
            tiny,
            PROMPTS,
            EVAL,
        )
    assert cli.main(["--out", str(out), "--stop-after-minutes", "0", "--target", "x"]) == 2


def test_a_run_can_start_from_a_trained_drafter(tiny, tmp_path):
    """--init-from: a device session's training goes on from the last one's drafter (brought
    back in parts), its shape and draft vocabulary kept, a fresh schedule over this run."""
    first = tmp_path / "first"
    run_a = pipeline.run(
        _args(first, tmp_path / "c", 0, "--draft-vocab", "9"), tiny, PROMPTS, EVAL, print
    )
    # At a zero learning rate the run's drafter is the one it started from, tensor for tensor.
    kept = tmp_path / "kept"
    args = _args(kept, tmp_path / "c", 0, "--init-from", str(first), "--lr", "0")
    card = pipeline.run(args, tiny, PROMPTS, EVAL, print)
    a, b = load_file(str(first / "model.safetensors")), load_file(str(kept / "model.safetensors"))
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert card["draft_vocab"]["size"] == 9 and "--init-from" in card["draft_vocab"]["counted_from"]
    assert f"--init-from {first}" in card["command"]
    # Its config says how it was trained: this run's steps, then the first run's record.
    saved = json.loads((kept / "config.json").read_text())["training"]
    first_record = json.loads((first / "config.json").read_text())["training"]
    assert saved["steps"] == card["training"]["steps"] and saved["init_from"] == first_record
    assert "init_from" not in first_record and card["drafter"]["training"] == saved
    lineage = (kept / "DATA_CARD.md").read_text()
    assert f"this run's {saved['steps']} steps came after {first_record['steps']} steps" in lineage
    assert f"{saved['steps'] + first_record['steps']} steps in all" in lineage
    # Trained on, it starts where the first run ended, not where a seeded drafter starts.
    on = pipeline.run(
        _args(tmp_path / "on", tmp_path / "c", 0, "--init-from", str(first)),
        tiny,
        PROMPTS,
        EVAL,
        print,
    )
    start_a, start_on = run_a["training"]["curve"][0]["loss"], on["training"]["curve"][0]["loss"]
    assert start_on < 0.8 * start_a, (start_on, start_a)
    # Its shape is the drafter's where the flags leave it open; another one asked is refused.
    words = ["--out", str(tmp_path / "x"), "--init-from", str(first)]
    assert cli.parse_args(words).block_size == 5 and cli.parse_args(words).draft_layers == 1
    for clash in (["--block-size", "4"], ["--draft-layers", "2"], ["--draft-vocab", "12"]):
        with pytest.raises(SystemExit):
            cli.parse_args(words + clash)
    with pytest.raises(SystemExit):
        cli.parse_args(["--out", str(tmp_path / "x"), "--init-from", str(tmp_path / "none")])


def test_the_step_time_is_read_once_the_first_slow_steps_are_behind():
    slow_then_fast = [2.6, 2.4, 2.5, 0.22, 0.23, 0.21, 0.22, 0.22]
    assert loop.settled_step_time(slow_then_fast) is None  # the slow window is still in view
    assert loop.settled_step_time([*slow_then_fast, 0.21, 0.22, 0.23, 0.22]) == pytest.approx(0.22)
    assert loop.settled_step_time([0.5] * 7) is None and loop.settled_step_time([0.5] * 8) == 0.5


def test_a_time_budget_counts_steps_at_their_settled_pace(tiny, monkeypatch):
    """The H100's first steps took ~2.5 s where the run's took 0.22 s: the count is the
    settled pace's (a fake clock, each probe step as long as the list says)."""
    clock = [0.0]
    pace = iter([2.6, 2.4, 2.5] + [0.2] * 40)

    def fake_step(*_args, **_kwargs):
        clock[0] += next(pace)
        return (torch.zeros((), requires_grad=True), None, 0)

    monkeypatch.setattr(loop, "step_loss", fake_step)
    monkeypatch.setattr(loop.time, "perf_counter", lambda: clock[0])
    usable = [dataset.Sample("chat", list(range(10, 40)), 10)]
    draft = DFlashDraftModel(DFlashConfig.for_target("tiny", tiny.config, block_size=5))
    st = loop.TrainSettings(minutes=4.0, anchors=2, seqs_per_step=1)
    total = loop.timed_step_count(draft, tiny, usable, st, log=lambda _: None)
    # 240 s less the probe's own (3 slow steps, 7 at 0.2 s: the window before the last four
    # holds one slow step) at 0.2 s a step (+5 % for AdamW); two timed steps read 2.45 s
    assert total == int((240 - 7.5 - 7 * 0.2) / (0.2 * 1.05))
    # a budget the probe would eat stops timing at its tenth and takes the latest pace
    pace = iter([2.6, 0.5])
    short = loop.timed_step_count(draft, tiny, usable, replace(st, minutes=0.5), log=lambda _: None)
    assert short == int((30 - 3.1) / (1.55 * 1.05))


def test_checkpoint_parts_are_bounded_and_checked(tmp_path):
    tensors = {
        "big": torch.arange(1000, dtype=torch.float32).view(10, 100),
        "step": torch.tensor(3.0),
        "rng": torch.arange(7, dtype=torch.uint8),
    }
    folder, size = tmp_path / "ck", checkpoint.HEADER_ROOM + 1024
    checkpoint.save_parts(folder, tensors, {"step": 3}, part_bytes=size)
    parts = sorted(folder.glob("*"))  # nothing beside the parts: the layout is in the first
    assert len(parts) == 4 and parts[0].name == "state-00001-of-00004.safetensors"
    assert all(p.stat().st_size <= size for p in parts)
    got, meta = checkpoint.load_parts(folder)
    assert meta == {"step": 3} and all(torch.equal(got[k], v) for k, v in tensors.items())
    assert checkpoint.read_meta(folder) == {"step": 3}
    checkpoint.save_parts(folder, {"x": torch.ones(3)}, {"step": 4})  # replaces the old one
    assert len(list(folder.glob("*"))) == 1 and checkpoint.load_parts(folder)[1]["step"] == 4
    checkpoint.save_parts(folder, tensors, {"step": 3}, part_bytes=size)
    second = folder / "state-00002-of-00004.safetensors"
    second.write_bytes(second.read_bytes()[:-4] + b"\0\0\0\0")  # data changed, header intact
    with pytest.raises(ValueError, match=r"00002-of-00004.*missing or damaged"):
        checkpoint.load_parts(folder)
    second.unlink()
    with pytest.raises(ValueError, match=r"00002-of-00004.*missing or damaged"):
        checkpoint.load_parts(folder)


def test_a_step_is_read_back_only_at_a_curve_point():
    """The loop leaves each step's loss and accuracy where they are (on the GPU: no wait for
    the device between steps) and reads them at a curve point or a checkpoint."""
    from specscope.engine.training.tally import Tally

    tally, lines = Tally(slots=2, total=5), []
    for step in range(3):
        tally.start()
        acc = torch.tensor([[1.0, 0.0], [0.0, 0.0]]) * (step + 1) / 3
        tally.record(step, torch.tensor(float(step)), acc, 1e-3, 30, every=2, log=lines.append)
        if step == 0:  # not a curve point: nothing read yet
            assert len(tally.pending) == 1 and tally.acc_n == 0 and not lines
    # step 2 (1-based) was a curve point: steps 0 and 1 read, their mean loss logged
    assert tally.curve[0]["step"] == 2 and tally.curve[0]["loss"] == pytest.approx(0.5)
    assert len(tally.pending) == 1 and tally.acc_n == 4 and len(lines) == 1
    state = tally.state()  # a checkpoint reads what is pending, and keeps no tensors
    assert not tally.pending and tally.acc_n == 6 and "pending" not in state
    assert tally.acc_sum[0] == pytest.approx((1 + 2 + 3) / 3) and tally.window == [2.0]
    assert json.loads(json.dumps(state))["tokens"] == 90


def _sampled(tiny, prompts_: list[list[int]], temperature: float, batch_size: int) -> dict:
    gen = target.Generator(tiny, 8, 16, batch_size, temperature=temperature)
    return {tuple(prompts_[i]): resp for i, resp in gen.stream(prompts_)}


def test_sampled_responses_are_seeded_per_prompt(tiny):
    """--response-temperature: a prompt's response depends on its tokens and the temperature
    only (not the batch, the order or the shard it is generated in), and is not the greedy one."""
    ids = [p for _, p in PROMPTS + EVAL]
    hot = _sampled(tiny, ids, 1.0, 2)
    assert hot == _sampled(tiny, ids[::-1], 1.0, 6)
    greedy = {tuple(p): r for p, r in zip(ids, target.generate(tiny, ids, 16)[0], strict=True)}
    assert hot != greedy and _sampled(tiny, ids, 0.0, 3) == greedy
    assert _sampled(tiny, ids, 0.6, 2) != hot
    assert target.prompt_seed([1, 2], 1.0) != target.prompt_seed([1, 2], 0.6)


def test_sampled_responses_have_their_own_cache_and_card(tiny, tmp_path):
    greedy_key = dataset._cache_key(tiny, PROMPTS, 16)
    blob = json.dumps([tiny.name, tiny.config.num_layers, str(tiny.dtype), 16, PROMPTS])
    assert greedy_key == hashlib.sha256(blob.encode()).hexdigest()[:16]  # caches stay valid
    assert len({greedy_key, *(dataset._cache_key(tiny, PROMPTS, 16, t) for t in (0.7, 1.0))}) == 3
    args = _args(tmp_path / "d", tmp_path / "c", 0, "--response-temperature", "1.0", "--steps", "6")
    card = pipeline.run(args, tiny, PROMPTS, EVAL, lambda _line: None)
    assert card["response_temperature"] == 1.0
    text = (tmp_path / "d" / "DATA_CARD.md").read_text()
    assert "sampled at temperature 1, each prompt seeded from its tokens" in text
    assert "--response-temperature 1.0" in card["command"]
    key = dataset._cache_key(tiny, PROMPTS, 40, 1.0)
    assert card["data"]["cache"].endswith(f"dflash-data-{key}")
    # evaluation stays greedy and lossless (sampled held-out responses are not its references)
    assert all(r["lossless_tree"] for r in card["evaluation"].values())


@pytest.mark.parametrize("value", ["-0.1", "2.5"])
def test_a_response_temperature_out_of_range_exits_2(capsys, tmp_path, value):
    with pytest.raises(SystemExit) as stop:
        cli.parse_args(["--out", str(tmp_path), "--response-temperature", value])
    assert stop.value.code == 2
    assert "--response-temperature must be within 0..2.0" in capsys.readouterr().err
