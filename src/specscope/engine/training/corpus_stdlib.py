"""The installed standard library as material: which modules, and their documented definitions.

Real code with real documentation is what teaches a drafter what its target writes about code,
and every Python installation carries megabytes of it under the PSF license. The files are
located with `sysconfig` and parsed with `ast`, never imported (importing runs module code).
Test suites, generated tables and the bundled documentation module are left out: they are not
the code or prose people ask a model about. A module is named as `import` names it
(`urllib/parse.py` -> `urllib.parse`), which is how the held-out split and the card refer to it.

probe/workloads/material.py reads the stdlib for the workload prompts the same way (its
`stdlib_dir`, its definition starts); the engine may not import the measuring side beyond
training/prompts.py (ARCHITECTURE §2), and this module needs every file, not the workloads'
fixed list, so the few lines of locating and walking are this module's own.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path

# Directories and files that are not material: tests, generated data, site packages.
_SKIP_PARTS = frozenset(
    {"test", "tests", "idle_test", "site-packages", "__pycache__", "encodings", "pydoc_data"}
)
_SKIP_PREFIXES = ("_sysconfigdata", "config-", "__phello__")
_Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass(frozen=True)
class Definition:
    """A public function, method or class of a stdlib module, with what prompts need of it."""

    module: str  # dotted module name, e.g. "urllib.parse"
    qualname: str  # "split", or "Shelf.keys" for a method
    kind: str  # "function", "method" or "class"
    signature: str  # "split(s, comments=False, posix=True)"; a class: its name
    doc: str  # the cleaned docstring ("" when none)
    code: str  # the definition's source, dedented
    code_without_doc: str  # the same with its docstring removed ("" when it cannot be)
    annotated: bool  # whether any parameter or the return value is annotated
    methods: tuple[str, ...]  # a class: "`sig`: first line of the docstring" per public method

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def module_name(rel: str) -> str:
    """`urllib/parse.py` -> `urllib.parse`; `json/__init__.py` -> `json`."""
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def stdlib_files(root: Path) -> list[tuple[str, str]]:
    """(module name, relative path) of every pure-Python stdlib file that is material, sorted
    by path (the same order on every machine)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        parts = rel.split("/")
        if _SKIP_PARTS.intersection(parts[:-1]) or parts[0].startswith(_SKIP_PREFIXES):
            continue
        out.append((module_name(rel), rel))
    return out


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    prefix = "async " if isinstance(node, ast.AsyncFunctionDef) else ""
    returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
    return f"{prefix}{node.name}({ast.unparse(node.args)}){returns}"


def _annotated(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    a = node.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
    return node.returns is not None or any(p is not None and p.annotation for p in params)


def _segment(lines: list[str], node: ast.AST, skip: ast.AST | None = None) -> str:
    """The node's source lines (decorators included), dedented; without `skip`'s lines."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    keep = range(first - 1, node.end_lineno or node.lineno)
    gone = range(skip.lineno - 1, skip.end_lineno or skip.lineno) if skip else range(0)
    return textwrap.dedent("".join(lines[i] for i in keep if i not in gone)).rstrip() + "\n"


def _method_lines(node: ast.ClassDef) -> tuple[str, ...]:
    out = []
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and (
            not item.name.startswith("_") or item.name == "__init__"
        ):
            doc = (ast.get_docstring(item) or "").strip().split("\n", 1)[0]
            out.append(f"- `{_signature(item)}`" + (f": {doc}" if doc else ""))
    return tuple(out)


def _definition(module: str, prefix: str, node: _Def, lines: list[str]) -> Definition:
    doc = inspect.cleandoc(ast.get_docstring(node, clean=False) or "")
    body = getattr(node, "body", [])
    # The docstring's lines can go when it has its own lines and is not the whole body.
    strippable = bool(doc) and len(body) > 1 and body[0].lineno > node.lineno
    is_class = isinstance(node, ast.ClassDef)
    return Definition(
        module=module,
        qualname=f"{prefix}{node.name}",
        kind="class" if is_class else ("method" if prefix else "function"),
        signature=node.name if is_class else _signature(node),
        doc=doc,
        code=_segment(lines, node),
        code_without_doc=_segment(lines, node, body[0]) if strippable else "",
        annotated=False if is_class else _annotated(node),
        methods=_method_lines(node) if is_class else (),
    )


@functools.lru_cache(maxsize=8)
def _tree(source: str) -> ast.Module | None:
    """The module's syntax tree, parsed once for the three readers below (None: not Python this
    interpreter parses)."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def definitions(module: str, source: str) -> list[Definition]:
    """The module's public top-level functions and classes and its classes' public methods, in
    source order (nested functions are not material: they need their enclosing code)."""
    tree = _tree(source)
    if tree is None:
        return []
    lines = source.splitlines(keepends=True)
    out: list[Definition] = []
    for node in tree.body:
        if not isinstance(node, _Def) or node.name.startswith("_"):
            continue
        out.append(_definition(module, "", node, lines))
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and not (
                    item.name.startswith("_")
                ):
                    out.append(_definition(module, f"{node.name}.", item, lines))
    return out


def module_docstring(source: str) -> str:
    tree = _tree(source)
    return inspect.cleandoc(ast.get_docstring(tree, clean=False) or "") if tree else ""


def code_windows(source: str, lo: int, hi: int) -> list[tuple[int, str]]:
    """(first line number, text) of non-overlapping stretches of the module's code, each starting
    where a definition starts and ending on a line boundary once it has `lo`..`hi` characters:
    code to continue from a natural starting point."""
    tree = _tree(source)
    if tree is None:
        return []
    starts = sorted(
        {
            min([n.lineno, *(d.lineno for d in n.decorator_list)]) - 1
            for n in ast.walk(tree)
            if isinstance(n, _Def)
        }
    )
    lines = source.splitlines(keepends=True)
    out: list[tuple[int, str]] = []
    end = 0
    for start in starts:
        if start < end:
            continue
        text, i = "", start
        while i < len(lines) and len(text) + len(lines[i]) <= hi:
            text += lines[i]
            i += 1
            if len(text) >= lo and not lines[i - 1].strip():
                break
        if len(text.strip()) >= lo:
            out.append((start + 1, text.rstrip() + "\n"))
            end = i
    return out
