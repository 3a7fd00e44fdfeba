"""The built-in prompt categories: what a user of a speculative server really sends.

Each category turns a seed into a `Frame` (an instruction head, natural units of real text,
and a tail that asks for the continuation). Drafters differ most between these: code edits
repeat the prompt (n-gram drafting thrives), completion continues structured text, while
open reasoning and long free-form writing are where a weak drafter is poor (the seed story).
"""

from __future__ import annotations

from collections.abc import Callable

from specscope.probe.prompts import Frame
from specscope.probe.workloads import material as m

CODE_COMPLETION = "code-completion"
CODE_EDIT = "code-edit"
PROSE_EDIT = "prose-edit"
CHAT = "chat"
SUMMARISATION = "summarisation"
REASONING = "reasoning"
LONG_WRITING = "long-writing"
MULTI_TURN = "multi-turn"


def code_completion(seed: int) -> Frame:
    return Frame(head="", units=m.code_lines(seed), tail="", unit_kind="line", strip=False)


def code_edit(seed: int) -> Frame:
    return Frame(
        head=(
            "Rewrite the following Python code so that every function has type hints and a "
            "one-line docstring. Keep the behaviour exactly the same.\n\n```python\n"
        ),
        units=m.code_lines(seed + 17),
        tail="```\n\nRewritten code:\n```python\n",
        unit_kind="line",
        strip=False,
    )


def prose_edit(seed: int) -> Frame:
    """A document to be returned corrected, the answer started with its first sentence: the
    output re-emits the prompt from its start, so a prompt-lookup drafter's source lies a whole
    prompt back (the case a drafter's window cuts). Small models copy prose where they cannot
    copy code (SmolLM2-135M, docs/faults.md)."""
    return Frame(
        head=(
            "Correct any spelling or grammar mistakes in the text below and return the whole "
            "corrected text, changing nothing else.\n\n"
        ),
        units=m.article_sentences(seed + 2) + m.prose_fallback(seed + 9),
        tail="\n\nCorrected text:\n\n",
        unit_kind="sentence",
        echo=True,
    )


def chat(seed: int) -> Frame:
    name, lines = m.doc_lines(seed + 5)
    return Frame(
        head="Use the reference documentation below to answer the question at the end.\n\n",
        units=lines,
        tail=(
            f"\n\nQuestion: What does `{name}` do, when would I use it, and what are its "
            "pitfalls? Give a short example.\nAnswer:"
        ),
        unit_kind="line",
    )


def summarisation(seed: int) -> Frame:
    return Frame(
        head="",
        units=m.article_sentences(seed) + m.prose_fallback(seed),
        tail="\n\nSummarise the text above in a few sentences, keeping the main facts.\nSummary:",
        unit_kind="sentence",
    )


def _worked_units(seed: int) -> list[str]:
    worked = m.problems()["worked"]
    out: list[str] = []
    for k in range(len(worked)):
        w = worked[(seed + k) % len(worked)]
        out += [
            f"Problem: {w['problem']}\n",
            f"Solution: {w['solution']}\n",
            f"Answer: {w['answer']}\n\n",
        ]
    return out


def reasoning(seed: int) -> Frame:
    open_ = m.problems()["open"]
    return Frame(
        head="Solve each problem step by step, explaining the reasoning, then give the answer.\n\n",
        units=_worked_units(seed) + m.prose_fallback(seed + 3),
        tail=f"\n\nProblem: {open_[seed % len(open_)]}\nSolution:",
        unit_kind="line",
    )


# Briefs for new writing: (subject, opening words). Asking to *continue* a text makes small
# models copy it back (prompt-lookup drafting then accepts nearly everything, a number no real
# writing workload shows); asking for a new piece in the style of the examples does not.
_BRIEFS = (
    ("a baker in a mountain village who finds a letter hidden in an old oven", "The baker"),
    (
        "two sisters who inherit a failing bicycle shop and must decide whether to sell it",
        "The shop",
    ),
    (
        "a night-shift nurse who notices that one patient's visitor never signs the book",
        "On the third night",
    ),
    ("a surveyor mapping a river delta the year before it is flooded for a reservoir", "The river"),
    (
        "a retired chess teacher who starts playing games by post with a stranger in prison",
        "The first letter",
    ),
    ("a ferry captain on the last crossing before the new bridge opens", "The ferry"),
    ("a child who runs the lost-and-found box at a busy railway station", "Every morning"),
    (
        "an archivist who finds her own name in a box of letters written a century ago",
        "The archive",
    ),
)


def long_writing(seed: int) -> Frame:
    subject, opening = _BRIEFS[seed % len(_BRIEFS)]
    return Frame(
        head="Here are examples of the kind of writing wanted: careful, concrete prose.\n\n",
        units=m.sentences(m.story()) + m.article_sentences(seed) + m.prose_fallback(seed + 7),
        tail=(
            f"\n\nNow write a new story, different from the examples, about {subject}. Write "
            f"several long paragraphs and bring it to an ending.\n\n{opening}"
        ),
        unit_kind="sentence",
    )


def _turn(role: str, text: str) -> str:
    return f"{'User' if role == 'user' else 'Assistant'}: {text}\n\n"


def multi_turn(seed: int) -> Frame:
    convs = m.conversations()
    last = convs[seed % len(convs)]
    earlier = [_turn(r, t) for k in range(1, len(convs)) for r, t in convs[(seed + k) % len(convs)]]
    return Frame(
        head="A conversation between a user and a helpful assistant. Earlier sessions come first."
        "\n\n",
        units=earlier + m.prose_fallback(seed + 11),
        tail="\n\n--- New session ---\n\n" + "".join(_turn(r, t) for r, t in last) + "Assistant:",
        unit_kind="turn",
    )


CATEGORIES: dict[str, Callable[[int], Frame]] = {
    CODE_COMPLETION: code_completion,
    CODE_EDIT: code_edit,
    PROSE_EDIT: prose_edit,
    CHAT: chat,
    SUMMARISATION: summarisation,
    REASONING: reasoning,
    LONG_WRITING: long_writing,
    MULTI_TURN: multi_turn,
}
