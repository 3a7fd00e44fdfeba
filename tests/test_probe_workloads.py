"""Real-content workloads: exact token lengths with the real SmolLM2 tokenizer, natural
boundaries, uniqueness within and across runs, file formats, and bad files."""

from __future__ import annotations

import asyncio
import json

import pytest

from specscope.probe.prompts import Frame, fit_units
from specscope.probe.workloads import (
    BUILT_IN,
    MIXED_ORDER,
    PromptSource,
    WorkloadError,
    resolve_workload,
)
from specscope.probe.workloads import material as m
from specscope.probe.workloads.categories import CATEGORIES

NATURAL = {"line", "sentence", "turn", "word"}


@pytest.fixture(scope="module")
def smollm2_count():
    """Token counts by SmolLM2's own tokenizer (read from the engine's GGUF), as a server's
    /tokenize would give them; plus the number of calls made."""
    pytest.importorskip("tokenizers")
    loader = pytest.importorskip("specscope.engine.loader")
    try:
        _, _, codec = loader.load_checkpoint(loader.smollm2_path(), with_weights=False)
    except FileNotFoundError as e:
        pytest.skip(f"SmolLM2 weights not installed: {e}")
    calls = [0]

    async def count(text: str) -> int:
        calls[0] += 1
        return len(codec.encode(text))

    count.calls = calls  # type: ignore[attr-defined]
    count.codec = codec  # type: ignore[attr-defined]
    return count


@pytest.mark.parametrize("n", [48, 256, 1024, 2700])
def test_every_category_is_exact_with_the_real_tokenizer(smollm2_count, n):
    src = PromptSource(smollm2_count, resolve_workload("mixed"))
    built = asyncio.run(src.prompts(n, len(MIXED_ORDER)))
    assert [b.category for b in built] == list(MIXED_ORDER)
    for b in built:
        assert b.exact and b.tokens == n, (b.category, b.tokens)
        assert len(smollm2_count.codec.encode(b.text)) == n  # measured, not assumed
        assert b.boundary in NATURAL, (b.category, b.boundary, b.text[-80:])


def test_cuts_end_on_natural_boundaries(smollm2_count):
    src = PromptSource(smollm2_count, resolve_workload("summarisation"), unique=False)
    b = asyncio.run(src.prompt(700, 0))
    assert b.text.endswith("\nSummary:")
    body = b.text[
        : -len("\n\nSummarise the text above in a few sentences, keeping the main facts.\nSummary:")
    ]
    if b.boundary == "sentence":
        assert body.rstrip()[-1] in ".!?\"'", body[-60:]
    code = PromptSource(smollm2_count, resolve_workload("code-completion"), unique=False)
    c = asyncio.run(code.prompt(300, 1))
    assert c.exact and (c.boundary == "word" or c.text.endswith("\n"))


def test_prompts_are_unique_within_and_across_runs_with_the_same_content(smollm2_count):
    wl = resolve_workload("mixed")
    a = asyncio.run(PromptSource(smollm2_count, wl).prompts(128, 14))
    b = asyncio.run(PromptSource(smollm2_count, wl).prompts(128, 14))
    texts = [p.text for p in a + b]
    assert len(set(texts)) == 28  # no two requests of either run share a prompt
    firsts = [t.split("\n", 1)[0] for t in texts]
    assert len(set(firsts)) == 28  # ...nor a first line, so no cacheable prefix either
    # The content after the reference is deterministic: the same in both runs.
    assert [p.text.split("\n", 1)[1] for p in a] == [p.text.split("\n", 1)[1] for p in b]
    same = asyncio.run(PromptSource(smollm2_count, wl, unique=False).prompts(128, 3))
    assert len({p.text for p in same}) == 1 and same[0].tokens == 128


def test_refit_under_a_new_reference_costs_one_count(smollm2_count):
    src = PromptSource(smollm2_count, resolve_workload("reasoning"))
    first = asyncio.run(src.prompt(900, 3, category="reasoning"))
    before = smollm2_count.calls[0]
    again = asyncio.run(src.prompt(900, 3, category="reasoning"))
    assert smollm2_count.calls[0] - before == 1
    assert again.text != first.text and again.tokens == first.tokens == 900


def test_content_is_real_text_not_filler():
    assert len(m.stdlib_sources()) >= 20
    code = "".join(m.code_lines(0)[:40])
    assert code in m.stdlib_sources()[0][1]  # verbatim from the installed stdlib
    assert code.lstrip().startswith(("def ", "class ", "@", "async def "))  # at a definition
    name, lines = m.doc_lines(0)
    assert name and len(lines) > 100
    for cat, make in CATEGORIES.items():
        frame = make(0)
        words = "".join(frame.units[:50]).split()
        assert len(set(words)) > 0.3 * len(words), cat  # not a few words over and over
    assert "synthetic" in BUILT_IN and "mixed" in BUILT_IN


def test_fit_units_with_a_word_counter_and_bare_frame():
    async def words(text: str) -> int:
        return len(text.split())

    frame = Frame(
        "Read this:\n",
        ["one two three. ", "four five. ", "six seven eight nine. "],
        "\nDone.",
        unit_kind="sentence",
    )
    b, _ = asyncio.run(fit_units(words, frame, 8))
    assert b.exact and b.text == "Read this:\none two three. four five.\nDone."
    later, _ = asyncio.run(fit_units(words, frame, 7))  # whole units from a later start
    assert later.exact and later.text == "Read this:\nsix seven eight nine.\nDone."
    partial, _ = asyncio.run(fit_units(words, frame, 4))  # no run of whole units: a word
    assert partial.exact and partial.boundary == "word" and partial.text == "Read this:\none\nDone."
    tiny, _ = asyncio.run(fit_units(words, frame, 2))  # shorter than head + tail: bare text
    assert tiny.exact and tiny.text == "four five."  # whole units beat a cut word


def _write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_file_workloads_prompts_messages_and_sharegpt(tmp_path):
    p = _write(
        tmp_path,
        "w.jsonl",
        [
            json.dumps({"prompt": "Explain TCP slow start.", "category": "chat"}),
            json.dumps(
                {
                    "messages": [
                        {"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "Why is the sea salty?"},
                    ]
                }
            ),
            json.dumps(
                {
                    "conversations": [
                        {"from": "human", "value": "Hi"},
                        {"from": "gpt", "value": "Hello!"},
                        {"from": "human", "value": "Tell me a joke"},
                        {"from": "gpt", "value": "dropped"},
                    ]
                }
            ),
            json.dumps("a bare string prompt"),
        ],
    )
    wl = resolve_workload(str(p))
    assert [fp.category for fp in wl.file_prompts] == ["chat", "file", "file", "file"]

    async def words(text: str) -> int:
        return len(text.split())

    src = PromptSource(words, wl)
    built = asyncio.run(src.prompts(999, 4))
    assert built[0].text.endswith("\nExplain TCP slow start.") and built[0].messages is None
    assert built[1].messages[0]["role"] == "system"
    assert built[1].messages[0]["content"].endswith("\nBe brief.")
    assert built[1].messages[0]["content"].startswith("[")  # the reference goes first
    assert built[2].messages[-1] == {"role": "user", "content": "Tell me a joke"}
    assert built[2].text.endswith("User: Tell me a joke\n\nAssistant:")
    assert len({b.text.split("\n", 1)[0] for b in built}) == 4
    assert all(b.tokens == len(b.text.split()) and b.boundary == "whole" for b in built)
    # Cut to an exact length for experiments that need one (diagnose).
    fit = PromptSource(words, wl, fit_files=True)
    b = asyncio.run(fit.prompt(12, 1))
    assert b.exact and b.tokens == 12


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "empty"),
        ("{not json\n", "line 1: not valid JSON"),
        (
            '{"prompt": "ok"}\n{"nothing": 1}\n',
            "line 2: no `prompt`, `messages` or `conversations`",
        ),
        ('{"messages": [{"role": "user"}]}\n', "message 0 needs string `role` and `content`"),
        ('{"conversations": [{"from": "robot", "value": "x"}]}\n', "unknown `from`"),
        ('{"conversations": [{"from": "gpt", "value": "x"}]}\n', "no human turn"),
        ('{"prompt": ""}\n', "must be a non-empty string"),
        ("[1, 2", "not valid JSON"),
        ("[]", "no prompts"),
    ],
)
def test_bad_files_are_one_clear_error(tmp_path, content, message):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(WorkloadError, match=message.replace("`", ".").replace("(", ".")):
        resolve_workload(str(p))


def test_unknown_name_and_binary_file(tmp_path):
    with pytest.raises(WorkloadError, match="neither a built-in workload"):
        resolve_workload("no-such-workload")
    p = tmp_path / "bin.jsonl"
    p.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(WorkloadError, match="not UTF-8"):
        resolve_workload(str(p))
    with pytest.raises(WorkloadError, match="is a directory"):
        resolve_workload(str(tmp_path))


@pytest.mark.parametrize("n", [256, 2700])
def test_prose_edit_answers_with_the_texts_opening_and_is_exact(smollm2_count, n):
    src = PromptSource(smollm2_count, resolve_workload("prose-edit"), unique=False)
    b = asyncio.run(src.prompt(n, 3))
    assert b.exact and b.tokens == n == len(smollm2_count.codec.encode(b.text))
    body, _, answer = b.text.partition("\n\nCorrected text:\n\n")
    assert answer and not answer[-1].isspace()  # the prompt ends inside the text, no space
    # the answer starts where the text given starts (its first sentence, again)
    given = body.split("changing nothing else.\n\n", 1)[1]
    assert given.startswith(answer), (given[:80], answer)
    assert "prose-edit" not in MIXED_ORDER and "prose-edit" in CATEGORIES


def test_an_echoing_frame_repeats_the_cuts_first_unit_after_the_tail():
    from specscope.probe.prompts import Cut, render

    frame = Frame("H: ", ["One. ", "Two. ", "Three. "], "\nA: ", unit_kind="sentence", echo=True)
    assert render(frame, Cut(2)) == "H: One. Two.\nA: One."
    assert render(frame, Cut(3, start=1)) == "H: Two. Three.\nA: Two."
    assert render(frame, Cut(0)) == "H: \nA: "  # no text, nothing to echo
