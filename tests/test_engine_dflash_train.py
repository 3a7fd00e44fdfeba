"""train_dflash on a tiny random target (CPU, seconds): the loss falls, the drafter and its card
are written, the saved drafter loads through `--drafter dflash:PATH` and decodes losslessly,
the same seed gives the same weights, and bad arguments exit 2 with one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402

from specscope.engine.loader import TINY_CONFIG, random_model  # noqa: E402
from specscope.engine.speculative import dflash_model  # noqa: E402
from specscope.engine.training import cli, dataset, loss, pipeline, prompts  # noqa: E402

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


def _args(out, cache, seed=0):
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
    assert all(v["loss"] > 0 and 1.0 <= v["expected_commit"] <= 5 for v in held)
    assert np.mean(curve[-2:]) < 0.8 * curve[0]
    out = tmp_path / "d"
    for name in ("config.json", "model.safetensors", "card.json", "DATA_CARD.md"):
        assert (out / name).is_file()
    saved = json.loads((out / "card.json").read_text())
    assert saved["data"]["sequences"] == len(PROMPTS) and saved["data"]["cached"] is False
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
