"""The code keeps ARCHITECTURE §2's dependency arrows and has no import cycle: every import in
src/specscope, function-local ones too (a local import that hides a cycle is still a cycle),
read from the source with ast (importing would hide what a lazy import defers)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "specscope"

# layer -> the layers it may import (§2's arrows); the root package (its __version__) is free.
ALLOWED: dict[str, frozenset[str]] = {
    k: frozenset(v)
    for k, v in {
        "cli": {"commands"},
        "commands": {
            "entrypoints",
            "embedded",
            "experiments",
            "probe",
            "analysis",
            "report",
            "store",
            "telemetry",
            "serve",
            "twin",
            "engine",
            "trace",
            "watch",
        },
        "entrypoints": {
            "embedded",
            "experiments",
            "probe",
            "analysis",
            "report",
            "store",
            "telemetry",
            "trace",
        },
        "embedded": {"serve", "twin", "engine"},
        "experiments": {"probe", "trace"},
        "probe": {"trace"},
        "analysis": {"trace", "telemetry"},
        "report": {"analysis", "trace", "store", "telemetry"},
        "store": {"analysis", "trace"},
        "telemetry": set(),
        "trace": set(),
        "backend": set(),
        "serve": {"backend"},
        "twin": {"backend"},
        "engine": {"backend"},
        "validation": {"twin", "analysis", "experiments", "trace"},
        "peers": set(),
        "watch": {"probe", "telemetry", "analysis", "report", "trace"},
    }.items()
}
# The named exceptions of §2, one module to one module (or package, for twin.server).
EXCEPTIONS = frozenset(
    {
        ("specscope.experiments.precision_loop", "specscope.analysis.headline.precision"),
        ("specscope.probe.specfields", "specscope.telemetry.llamacpp"),
        ("specscope.report.terminal", "specscope.experiments.plan"),
        ("specscope.engine.training.prompts", "specscope.probe.workloads.categories"),
        ("specscope.twin.server", "specscope.serve"),
    }
)


# Inside analysis/, concept -> the concepts it may import (ARCHITECTURE §2): the folders in the
# order of the story (steps and fits first, the diagnosis last), result.py free for all; the
# public face (analysis/__init__.py) may import any of them.
ANALYSIS_ALLOWED: dict[str, frozenset[str]] = {
    k: frozenset(v)
    for k, v in {
        "steps": set(),
        "fits": set(),
        "headline": {"steps", "fits", "client_health"},
        "workload": {"headline", "steps"},
        "diagnosis": {"headline", "fits", "steps", "workload", "serving", "client_health"},
        "serving": {"headline", "steps"},
        "summary": {"headline", "steps", "workload", "client_health"},
        "client_health": set(),
        "result": set(),
        "watch": {"steps", "diagnosis"},
    }.items()
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / ROOT).rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The specscope modules `name` imports. `from pkg import sub` imports the submodule, not
    the package's own code beyond its __init__ (which Python runs anyway, once)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            subs = {f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in modules}
            found.update(subs if len(subs) == len(node.names) else {mod, *subs})
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, or None (iterative depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for start in sorted(graph):
        if state.get(start):
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return [*path[path.index(child) :], child]
            elif not state.get(child):
                state[child] = 1
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
    return None


def _excepted(a: str, b: str) -> bool:
    return any(a == src and (b == dst or b.startswith(dst + ".")) for src, dst in EXCEPTIONS)


def test_every_module_is_in_a_layer_of_the_map():
    layers = {_layer(m) for m in _graph()} - {ROOT}
    assert layers == set(ALLOWED), layers ^ set(ALLOWED)


def test_imports_follow_the_layer_arrows():
    bad = sorted(
        f"{a} -> {b}" for a, targets in _graph().items() for b in targets
        if _layer(b) not in {_layer(a), ROOT} and _layer(b) not in ALLOWED[_layer(a)]
        and not _excepted(a, b)
    )  # fmt: skip
    assert not bad, "imports against ARCHITECTURE §2:\n" + "\n".join(bad)


def _concept(module: str) -> str | None:
    """analysis' concept of a module (its folder, or its module directly in analysis/); None
    for the public face and for modules outside analysis."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "analysis" else None


def test_analysis_concepts_follow_their_arrows():
    graph = _graph()
    concepts = {_concept(m) for m in graph} - {None}
    assert concepts == set(ANALYSIS_ALLOWED), concepts ^ set(ANALYSIS_ALLOWED)
    bad = sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        for b in targets
        if (ca := _concept(a)) is not None
        and (cb := _concept(b)) not in {ca, None, "result"}
        and cb not in ANALYSIS_ALLOWED[ca]
    )
    assert not bad, "imports against analysis/'s arrows (ARCHITECTURE §2):\n" + "\n".join(bad)


def test_analysis_is_cut_by_concept():
    top = sorted(p.name for p in (SRC / ROOT / "analysis").glob("*.py"))
    folders = [p for p in (SRC / ROOT / "analysis").iterdir() if (p / "__init__.py").exists()]
    assert len(top) <= 8 and len(folders) >= 3, (top, folders)


def test_every_named_exception_is_still_used():
    graph = _graph()
    unused = [e for e in EXCEPTIONS if not any(_excepted(e[0], b) for b in graph.get(e[0], ()))]
    assert not unused, unused


def test_no_import_cycle():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()) or [])


def test_the_cycle_finder_finds_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"b"}}) is None
