"""How the corpus's prompts are worded: several phrasings per request, one chosen per prompt.

A drafter that saw one instruction wording learns that wording, not the target's answers to
varied requests; so every prompt kind has several phrasings (questions, imperatives, casual and
formal, instruction before or after the material), and `render` picks one from a stable hash of
the seed and the prompt's id: the same sources and seed give the same text on every machine
(never Python's salted `hash`). The material (code, docstring, passage) is always real text;
the phrasings are the only words the project writes.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TypeVar

from specscope.engine.training.corpus import CorpusPrompt

T = TypeVar("T")

#: Every prompt's length in characters lies in this range (the target is small, its context 8k).
MIN_CHARS, MAX_CHARS = 200, 1600

_PY = "```python\n{code}\n```"

TEMPLATES: dict[str, tuple[str, ...]] = {
    # A function or method written from its signature and documentation (new code).
    "code-write-function": (
        "Write a Python {thing} `{name}` with the signature `def {sig}:` that does the following."
        "\n\n{doc}",
        "Implement `{qual}` in Python. Its documentation says:\n\n{doc}\n\n"
        "Write the complete {thing}, docstring included.",
        'Here is a docstring without its code:\n\n```python\ndef {sig}:\n    """{doc_block}"""\n'
        "```\n\nWrite the body of the {thing} `{name}`.",
        "From this description, write the Python code for `{qual}`.\n\nSignature: `def {sig}`\n\n"
        "Description:\n{doc}",
        "I need a {thing} `{name}` for the `{module}` module. This is what it should do:\n\n"
        "{doc}\n\nIt is declared as `def {sig}`. Can you write it?",
        "Task: complete the {thing} `{name}` below so that it behaves as documented.\n\n```python\n"
        'def {sig}:\n    """{doc_block}"""\n    ...\n```',
        "{doc}\n\nWrite a Python {thing} `{name}` (`def {sig}`) that does what is described above.",
        "Please write `def {sig}` ({thing} `{qual}`) from this specification:\n\n{doc}\n\n"
        "Keep it readable and handle the edge cases the description mentions.",
    ),
    # A class written from its documentation and its methods' signatures (new code).
    "code-write-class": (
        "Write a Python class `{name}`.\n\n{doc}\n\nIt should have these methods:\n{methods}",
        "Implement the class `{qual}` from this description:\n\n{doc}\n\nPublic methods:\n{methods}",
        "I need a class for the `{module}` module:\n\n```python\nclass {name}:\n"
        '    """{doc_block}"""\n```\n\nWrite it, with these methods:\n{methods}',
        "Design and write the class `{name}`. Its docstring reads:\n\n{doc}\n\n"
        "Methods to provide:\n{methods}",
        "{doc}\n\nWrite a Python class `{name}` that does what is described above, with the "
        "methods:\n{methods}",
    ),
    # Explain real code.
    "code-explain": (
        "Explain what this function does:\n\n" + _PY,
        "Walk me through this code, step by step.\n\n" + _PY,
        _PY + "\n\nWhat does `{name}` do, what does it return, and when can it fail?",
        "I found this code. Can you explain how it works in simple terms?\n\n" + _PY,
        "Summarise the purpose and the logic of the following Python code in a few sentences.\n\n"
        + _PY,
        "Read this code and describe its inputs, its output and its side effects.\n\n" + _PY,
        "Could you explain `{qual}` to a junior developer? Here is the code:\n\n" + _PY,
    ),
    # Edits of real code; the variant decides which (see corpus_code.edit_variant).
    "code-edit-docstring": (
        "Add a docstring to this function that explains its arguments and what it returns.\n\n"
        + _PY,
        _PY + "\n\nThis function has no documentation. Write a clear docstring for it and return "
        "the whole function.",
        "Document the following code: add a PEP 257 docstring.\n\n" + _PY,
    ),
    "code-edit-hints": (
        "Add type hints to this function. Keep its behaviour unchanged.\n\n" + _PY,
        _PY + "\n\nRewrite this with full type annotations for the parameters and the return "
        "value.",
        "Please annotate `{name}` with precise type hints:\n\n" + _PY,
    ),
    "code-edit-refactor": (
        "Refactor this function to make it easier to read without changing what it does.\n\n" + _PY,
        _PY + "\n\nHow would you improve this code? Show the improved version and say what "
        "changed.",
        "Rewrite `{name}` in modern, idiomatic Python 3:\n\n" + _PY,
        "Review this function and suggest changes (naming, structure, error handling), then give "
        "the revised code.\n\n" + _PY,
    ),
    "code-edit-comments": (
        "Add comments to this code that explain each step.\n\n" + _PY,
        _PY + "\n\nAnnotate this function with inline comments for a reader new to Python.",
    ),
    # Tests for real code.
    "code-test": (
        "Write pytest tests for this function.\n\n" + _PY,
        "Write unit tests (unittest.TestCase) that cover the normal cases and the edge cases of "
        "`{name}`:\n\n" + _PY,
        _PY + "\n\nWhat test cases would you write for `{name}`? Write them as pytest functions.",
        "Here is `{qual}`:\n\n" + _PY + "\n\nWrite a small test suite for it.",
        "Give me a few tests that would catch a bug in this code:\n\n" + _PY,
    ),
    # HumanEval: a function stub with its docstring, to be completed.
    "code-solve": (
        "Complete the following Python function.\n\n" + _PY,
        _PY + "\n\nWrite the body of `{name}` so that it satisfies its docstring and examples.",
        "Solve this programming task in Python:\n\n" + _PY,
        "Implement `{name}`:\n\n" + _PY + "\n\nExplain your approach briefly after the code.",
    ),
    # Documentation prose: summary, question, beginner explanation.
    "doc-summary": (
        "Summarise the following documentation in two or three sentences.\n\n{text}",
        "TL;DR this part of the Python documentation ({title}):\n\n{text}",
        "{text}\n\nWrite a short summary of the text above.",
        "Give me the key points of this documentation as a bulleted list.\n\n{text}",
        "Here is the documentation of {title}. Condense it into one paragraph.\n\n{text}",
    ),
    "doc-question": (
        "Based on the text below, what is {title} used for, and how do I use it?\n\n{text}",
        "{text}\n\nAccording to this documentation, what should I watch out for when using "
        "{title}?",
        "I'm reading about {title}:\n\n{text}\n\nCan you give me an example of how to use it?",
        "Read this excerpt and answer: what problem does {title} solve?\n\n{text}",
        "{text}\n\nWhat are the main things this text says about {title}? Answer with examples.",
        "Question about {title}: when would I choose it over the alternatives? Here is what the "
        "documentation says:\n\n{text}",
    ),
    "doc-beginner": (
        "Explain this to someone who is new to Python:\n\n{text}",
        "I'm a beginner. What does this documentation about {title} mean, in plain words?\n\n"
        "{text}",
        "{text}\n\nCan you explain the text above like I'm learning to program?",
        "Rewrite this explanation of {title} for a complete beginner, with a small example.\n\n"
        "{text}",
    ),
    # Literature: paraphrase, explanation, imitation, summary.
    "lit-paraphrase": (
        "Rewrite this passage from {title} in modern English.\n\n{text}",
        "{text}\n\nPut these lines from {title} into plain everyday English.",
        "What are these lines saying? Paraphrase them in your own words.\n\n{text}",
        "Translate this passage ({title}) into simple, modern prose:\n\n{text}",
    ),
    "lit-explain": (
        "Explain what is happening in this passage from {title} ({where}).\n\n{text}",
        "{text}\n\nWho is speaking here, what do they want, and what is the mood of the passage? "
        "(From {title}, {where}.)",
        "Explain the language and imagery of this passage from {title}.\n\n{text}",
        "I'm studying {title}. Can you explain this part ({where}) to me?\n\n{text}",
        "{text}\n\nWhat is the meaning of this passage, and why does it matter in {title}?",
    ),
    "lit-style": (
        "Here is a passage from {title}:\n\n{text}\n\nWrite a new passage in the same style on a "
        "different subject.",
        "Using this as a model, write an original piece in the style of {author}:\n\n{text}",
        "{text}\n\nImitate the voice and rhythm of these lines in a short original passage about "
        "modern city life.",
        "Write a short scene or poem that {author} might have written, inspired by this passage "
        "from {title}:\n\n{text}",
    ),
    "lit-summary": (
        "Summarise this passage from {title} ({where}).\n\n{text}",
        "{text}\n\nWhat happens in this passage? Answer in a few sentences.",
        "Give a brief summary of these lines from {title}:\n\n{text}",
        "Tell me in plain words what this passage ({title}, {where}) is about.\n\n{text}",
    ),
}


def pick(options: Sequence[T], *keys: object) -> T:
    """One of `options`, chosen by a stable hash of `keys` (crc32: the same on every run)."""
    return options[zlib.crc32("\x1f".join(map(str, keys)).encode("utf-8")) % len(options)]


def render(family: str, seed: int, uid: str, **fields: str) -> str:
    """A prompt of `family` for the prompt `uid`: its phrasing chosen by (seed, family, uid)."""
    return pick(TEMPLATES[family], seed, family, uid).format(**fields)


def make_prompt(
    kind: str, source: str, unit: str, text: str, *, raw: bool = False, split: str = "train"
) -> CorpusPrompt | None:
    """The record `kind/source/unit` (its id), or None when the text is outside the length
    range: too short says little, too long leaves the small target little room to answer."""
    text = text if raw else text.strip()
    if not MIN_CHARS <= len(text) <= MAX_CHARS:
        return None
    return CorpusPrompt(f"{kind}/{source}/{unit}", kind, source, text, raw, split)
