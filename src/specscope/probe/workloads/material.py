"""Text the project may ship, as lists of natural units (lines, sentences, turns).

Two sources. The Python standard library's own sources and docstrings, read at run time from
the installed stdlib (located with `sysconfig`, parsed with `ast`, never imported), so code
prompts are real code that every Python has, and nothing is vendored. And a few texts written
for the project (package data in `texts/`): articles, a story, worked maths problems and
conversations. Every choice is deterministic in a seed: the same seed gives the same text on
the same Python version.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import re
import sysconfig
from importlib import resources
from pathlib import Path
from typing import Any

from specscope.probe.prompts import PromptError

# Pure-Python stdlib modules with substantial, stable code and prose docstrings (3.11-3.13).
# Files missing from an installation are skipped.
STDLIB_FILES = (
    "argparse.py",
    "difflib.py",
    "textwrap.py",
    "statistics.py",
    "fractions.py",
    "calendar.py",
    "configparser.py",
    "shlex.py",
    "pprint.py",
    "dataclasses.py",
    "functools.py",
    "heapq.py",
    "bisect.py",
    "csv.py",
    "string.py",
    "ipaddress.py",
    "gettext.py",
    "tokenize.py",
    "enum.py",
    "inspect.py",
    "random.py",
    "glob.py",
    "fnmatch.py",
    "queue.py",
    "sched.py",
    "copy.py",
    "contextlib.py",
    "base64.py",
    "shutil.py",
    "tempfile.py",
    "threading.py",
    "selectors.py",
    "traceback.py",
    "warnings.py",
    "optparse.py",
    "mailbox.py",
    "smtplib.py",
    "ftplib.py",
    "tarfile.py",
    "json/decoder.py",
    "json/encoder.py",
    "http/client.py",
    "http/cookiejar.py",
    "urllib/parse.py",
    "logging/__init__.py",
    "unittest/case.py",
    "asyncio/tasks.py",
    "concurrent/futures/_base.py",
    "email/message.py",
    "collections/__init__.py",
)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


@functools.cache
def stdlib_sources() -> tuple[tuple[str, str], ...]:
    """(relative path, source text) of every listed stdlib file present, in list order."""
    root = stdlib_dir()
    out = []
    for rel in STDLIB_FILES:
        p = root / rel
        try:
            out.append((rel, p.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    if not out:
        raise PromptError(
            f"no Python standard library sources under {root}: real-content "
            "workloads need them (use --workload synthetic or a --workload FILE)"
        )
    return tuple(out)


def _definition_starts(source: str) -> list[int]:
    """0-based line numbers where a top-level or class-level def/class starts (decorators
    included), in order: natural places to begin a code excerpt."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [0]
    starts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            starts.append(first - 1)
    return sorted(set(starts)) or [0]


def code_lines(seed: int) -> list[str]:
    """Source lines (each ending in a newline) starting at a definition chosen by `seed`,
    continuing through the following files: enough for any prompt length."""
    sources = stdlib_sources()
    first = seed % len(sources)
    out: list[str] = []
    for k in range(len(sources)):
        _, text = sources[(first + k) % len(sources)]
        lines = text.splitlines(keepends=True)
        if k == 0:
            starts = _definition_starts(text)
            # Skip the file's first definitions (often tiny helpers) by a seed-chosen stride.
            start = starts[(seed // len(sources) * 7 + 3) % len(starts)]
            lines = lines[start:]
        out += [ln if ln.endswith("\n") else ln + "\n" for ln in lines]
    return out


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    try:
        return f"({ast.unparse(node.args)})"
    except ValueError:
        return "(...)"


@functools.cache
def _doc_entries(rel: str, source: str) -> tuple[tuple[str, str], ...]:
    """(name, "name(signature)\\n    docstring...") for the module and each documented
    class, function and method, in source order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    mod = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    out: list[tuple[str, str]] = []
    doc = ast.get_docstring(tree)
    if doc:
        out.append((mod, f"Module {mod}\n\n{inspect.cleandoc(doc)}\n\n"))

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                if node.name.startswith("_"):
                    continue
                name = f"{prefix}{node.name}"
                d = ast.get_docstring(node)
                if d:
                    sig = "" if isinstance(node, ast.ClassDef) else _signature(node)
                    kind = "class " if isinstance(node, ast.ClassDef) else ""
                    text = inspect.cleandoc(d).replace("\n", "\n    ")
                    out.append((name, f"{kind}{mod}.{name}{sig}\n    {text}\n\n"))
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{name}.")

    visit(tree.body, "")
    return tuple(out)


def doc_entries(seed: int) -> list[tuple[str, str]]:
    """Documentation entries from the stdlib, starting at the file chosen by `seed`."""
    sources = stdlib_sources()
    first = seed % len(sources)
    out: list[tuple[str, str]] = []
    for k in range(len(sources)):
        rel, text = sources[(first + k) % len(sources)]
        out += _doc_entries(rel, text)
    return out


def doc_lines(seed: int) -> tuple[str, list[str]]:
    """(the first documented name, documentation lines) for reference-style prompts."""
    entries = doc_entries(seed)
    named = [n for n, _ in entries if "." not in n or n.count(".") == 1]
    first = named[0] if named else entries[0][0]
    lines = [ln for _, e in entries for ln in e.splitlines(keepends=True)]
    return first, lines


def sentences(text: str) -> list[str]:
    """Sentences with their trailing whitespace kept (a paragraph break stays with the
    sentence before it), so that joining them gives back `text`."""
    out: list[str] = []
    for para in re.split(r"(\n\s*\n)", text):
        if not para:
            continue
        if not para.strip():
            if out:
                out[-1] += para
            continue
        pieces = _SENTENCE_END.split(para)
        spaces = _SENTENCE_END.findall(para)
        for i, s in enumerate(pieces):
            out.append(s + (spaces[i] if i < len(spaces) else ""))
    return out


def _text(name: str) -> str:
    return (
        resources.files("specscope.probe.workloads")
        .joinpath("texts", name)
        .read_text(encoding="utf-8")
    )


@functools.cache
def articles() -> tuple[str, ...]:
    """The written articles (title line first), each a few hundred words."""
    return tuple(a.strip() + "\n" for a in _text("articles.txt").split("\n---\n") if a.strip())


@functools.cache
def story() -> str:
    return _text("story.txt").strip() + "\n"


@functools.cache
def problems() -> dict[str, Any]:
    """{"worked": [{problem, solution, answer}], "open": [problem, ...]}."""
    data = json.loads(_text("problems.json"))
    return {"worked": tuple(data["worked"]), "open": tuple(data["open"])}


@functools.cache
def conversations() -> tuple[tuple[tuple[str, str], ...], ...]:
    """Conversations as (role, text) turns; each ends with a user turn."""
    return tuple(tuple((r, t) for r, t in c) for c in json.loads(_text("conversations.json")))


def article_sentences(seed: int) -> list[str]:
    """All articles as sentences, starting at the one chosen by `seed`, separated by blank lines."""
    arts = articles()
    first = seed % len(arts)
    out: list[str] = []
    for k in range(len(arts)):
        s = sentences(arts[(first + k) % len(arts)])
        s[-1] = s[-1].rstrip() + "\n\n"
        out += s
    return out


def prose_fallback(seed: int) -> list[str]:
    """Lines of stdlib documentation: more real prose when a prompt outgrows the written texts."""
    return doc_lines(seed + 1)[1]
