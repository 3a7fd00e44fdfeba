"""Prose about code: summaries, questions and beginner explanations of real documentation.

Chat about a library is most of what a small instruct model is asked, and the target's answers
to it are what a drafter must predict there. The material is the documentation people read:
the stdlib's docstrings (always available) and the reference pages of Python's documentation
(reStructuredText from Debian's pythonX.Y-doc, when given). Sphinx markup is reduced to what a
reader sees (roles to their text, signatures and admonitions to plain lines, index and
metadata directives dropped), then cut into section-bounded chunks of whole paragraphs.
"""

from __future__ import annotations

import re
import textwrap

from specscope.engine.training.corpus import CorpusPrompt
from specscope.engine.training.corpus_phrasing import make_prompt, pick, render
from specscope.engine.training.corpus_stdlib import Definition

DOC_KINDS = ("doc-summary", "doc-question", "doc-beginner")
#: A docstring shorter than this is a line, not prose to discuss.
MIN_PROSE_CHARS = 250
#: A chunk of documentation in a prompt.
CHUNK_CHARS = (300, 1200)
#: The documentation's parts that are prose for Python users (not the C API, not changelogs).
DOC_SECTIONS = ("library/", "tutorial/", "howto/", "faq/", "reference/", "using/", "glossary")

_SIG_DIRECTIVES = frozenset(
    [
        "function",
        "method",
        "class",
        "exception",
        "attribute",
        "data",
        "decorator",
        "decoratormethod",
        "classmethod",
        "staticmethod",
        "describe",
        "opcode",
        "cmdoption",
        "option",
        "envvar",
        "coroutinefunction",
        "coroutinemethod",
        "abstractmethod",
        "property",
        "pdbcommand",
    ]
)
_KEEP_BODY = frozenset(
    ["code-block", "sourcecode", "doctest", "testcode", "parsed-literal", "glossary"]
)
_LABELS = {
    "note": "Note:",
    "warning": "Warning:",
    "seealso": "See also:",
    "important": "Important:",
    "tip": "Tip:",
    "hint": "Hint:",
    "caution": "Caution:",
    "attention": "Attention:",
    "impl-detail": "CPython implementation detail:",
    "versionadded": "New in version {}.",
    "versionchanged": "Changed in version {}:",
    "deprecated": "Deprecated since version {}:",
    "deprecated-removed": "Deprecated since version {}:",  # then the removal version
}
_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::\s*(.*)$")
_COMMENT = re.compile(r"^(\s*)\.\.(\s|$)")
_ROLE = re.compile(r":[\w+.-]+(?::[\w+.-]+)?:`([^`]+)`")
_PLAIN_ROLE = re.compile(r":(?:ref|doc|term|pep|rfc|abbr|dfn|title-reference):`([^`]+)`")
_ADORNMENT = re.compile(r"^([=\-~^*#\"'`+.:_])\1{2,}\s*$")


def _role_text(m: re.Match[str], code: bool) -> str:
    text = re.sub(r"\s*<[^>]*>$", "", m.group(1)).lstrip("!")
    if text.startswith("~"):
        text = text[1:].rsplit(".", 1)[-1]
    return f"`{text}`" if code else text


def inline(text: str) -> str:
    """Inline Sphinx markup as a reader sees it: roles to their text (code as `code`), links
    to their text, escapes and footnote references removed."""
    text = _PLAIN_ROLE.sub(lambda m: _role_text(m, code=False), text)
    text = _ROLE.sub(lambda m: _role_text(m, code=True), text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    text = re.sub(r"`([^`<]+?)\s*<[^>]+>`_{1,2}", r"\1", text)
    text = re.sub(r"\s*\[#\w*\]_", "", text)
    return text.replace("\\ ", "").replace("\\*", "*")


def _block_end(lines: list[str], i: int, indent: int) -> int:
    """The index after the indented block that belongs to the directive on line i."""
    j = i + 1
    while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > indent):
        j += 1
    return j


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _directive_lines(name: str, arg: str, pad: str, body: list[str]) -> list[str]:
    """What a reader sees of one directive: a signature or a label line, then its body."""
    while body and re.match(r"^\s*:[\w-]+:", body[0]):  # the directive's options
        body = body[1:]
    body = clean_rst("\n".join(body))  # directives nest
    if name in _SIG_DIRECTIVES:
        return [f"{pad}`{arg}`", *body, ""] if arg else [*body, ""]
    if name in _KEEP_BODY:
        return ["", *body, ""]
    if name in _LABELS:
        label = _LABELS[name]
        if "{}" in label:  # the argument is a version, then maybe text
            version, _, rest = arg.partition(" ")
            label, arg = label.format(version), "" if name == "deprecated-removed" else rest
        return [f"{pad}{label} {arg}".rstrip(), *body, ""]
    return []


def clean_rst(text: str) -> list[str]:
    """The page's lines with directives resolved and comments dropped (headings kept)."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        m = _DIRECTIVE.match(line)
        if m or _COMMENT.match(line):
            end = _block_end(lines, i, _indent(line))
            if m:
                out += _directive_lines(
                    m.group(2), m.group(3).strip(), m.group(1), lines[i + 1 : end]
                )
            i = end
            continue
        out.append(line)
        i += 1
    return out


def sections(text: str) -> list[tuple[str, list[str]]]:
    """(heading, paragraphs) of a reStructuredText page, in order (a heading with no text of
    its own too: the page's title may be one); paragraphs dedented, inline markup resolved,
    tables dropped, a literal-block marker `::` shown as `:`."""
    lines = clean_rst(text)
    out: list[tuple[str, list[str]]] = [("", [])]
    para: list[str] = []

    def flush() -> None:
        body = textwrap.dedent("\n".join(para)).strip("\n")
        para.clear()
        if body.strip() and not body.lstrip().startswith(("+-", "==", "--")):
            body = re.sub(r"\s*::$", ":", body) if body.strip() != "::" else ""
            if body:
                out[-1][1].append(inline(body))

    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if _ADORNMENT.match(line):
            continue
        if line.strip() and _ADORNMENT.match(nxt) and len(nxt.strip()) >= len(line.strip()):
            flush()
            out.append((inline(line.strip()), []))
        elif not line.strip():
            flush()
        else:
            para.append(line)
    flush()
    return [(h, ps) for h, ps in out if h or ps]


def chunks(paragraphs: list[str], lo: int, hi: int) -> list[str]:
    """Consecutive whole paragraphs joined into pieces of lo..hi characters (a paragraph longer
    than hi is left out: cutting it would cut a thought)."""
    out, cur = [], ""
    for p in paragraphs:
        if len(p) > hi:
            cur = ""
            continue
        if cur and len(cur) + 2 + len(p) > hi:
            if len(cur) >= lo:
                out.append(cur)
            cur = ""
        cur = f"{cur}\n\n{p}" if cur else p
    if len(cur) >= lo:
        out.append(cur)
    return out


def doc_prompt(
    source: str, unit: str, title: str, text: str, seed: int, split: str = "train"
) -> CorpusPrompt | None:
    """One chat prompt about a piece of documentation: its kind (summary, question, beginner
    explanation) and its phrasing chosen by the seed."""
    kind = pick(DOC_KINDS, seed, "doc-kind", source, unit)
    return make_prompt(
        kind,
        source,
        unit,
        render(kind, seed, f"{source}/{unit}", title=title, text=text),
        split=split,
    )


def docstring_prompts(
    module: str, module_doc: str, defs: list[Definition], seed: int, split: str = "train"
) -> list[CorpusPrompt]:
    """Prompts about the module's docstring and its definitions' long docstrings."""
    items = [(module, f"the `{module}` module", module_doc)]
    items += [
        (d.qualname, f"`{module}.{d.qualname}`", f"`{d.signature}`\n\n{d.doc}")
        for d in defs
        if len(d.doc) >= MIN_PROSE_CHARS
    ]
    out = []
    for unit, title, text in items:
        if len(text) < MIN_PROSE_CHARS:
            continue
        text = (chunks(text.split("\n\n"), MIN_PROSE_CHARS, CHUNK_CHARS[1]) or [""])[0]
        p = doc_prompt(f"stdlib:{module}", unit, title, text, seed, split)
        if p is not None:
            out.append(p)
    return out


def page_prompts(page: str, text: str, seed: int) -> list[CorpusPrompt]:
    """Prompts about the chunks of one documentation page (`library/shlex.rst.txt`)."""
    parts = sections(text)
    # "`shlex` --- Simple lexical analysis" is asked about as "`shlex`".
    first = next((h for h, _ in parts if h), "")
    page_title = (first or page).split(" --- ")[0]
    source, out = f"python-doc:{page.removesuffix('.rst.txt')}", []
    for s, (heading, paragraphs) in enumerate(parts):
        title = page_title if heading in ("", first) else f"{page_title} ({heading})"
        for c, chunk in enumerate(chunks(paragraphs, *CHUNK_CHARS)):
            p = doc_prompt(source, f"s{s}c{c}", title, chunk, seed)
            if p is not None:
                out.append(p)
    return out
