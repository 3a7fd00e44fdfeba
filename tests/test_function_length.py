"""Where the diagnosis lives, functions stay short enough to read at once: no body over 60
lines in analysis/, commands/ and report/, counted from the first statement (docstring
included) to the function's last line; the signature does not count."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "specscope"
PACKAGES = ("analysis", "commands", "report")
MAX_BODY = 60


def _long_bodies(source: str) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.body[0].lineno + 1
            if lines > MAX_BODY:
                out.append((node.name, lines))
    return out


def test_no_function_body_over_60_lines():
    long = [
        f"{path.relative_to(SRC)}:{name} ({lines} lines)"
        for package in PACKAGES
        for path in sorted((SRC / package).rglob("*.py"))
        for name, lines in _long_bodies(path.read_text(encoding="utf-8"))
    ]
    assert not long, "function bodies over 60 lines:\n" + "\n".join(long)


def test_the_measure_counts_from_the_first_statement_to_the_last_line():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_BODY))
    signature = "def f(\n    a,\n    b,\n):\n"
    assert _long_bodies(signature + body + "\n") == []
    assert _long_bodies(signature + body + "\n    return x0\n") == [("f", MAX_BODY + 1)]
