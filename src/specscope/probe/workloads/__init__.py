"""Workloads: which prompts a run sends, by category, each of an exact token length and unique.

`--workload NAME|FILE`. Built-in names: one category (`code-completion`, `code-edit`,
`prose-edit`, `chat`, `summarisation`, `reasoning`, `long-writing`, `multi-turn`), `mixed` (the
seven of MIXED_ORDER, request i gets category i mod 7: `prose-edit`, added later, stays out so
that mixed runs stay comparable), or `synthetic` (filler words: kept for comparison with old
runs, never the default). A FILE is JSONL of prompts, OpenAI messages or ShareGPT
conversations, used as given (their length is counted, not cut).

Uniqueness: a prefix cache (vLLM's is on by default) turns a repeated prompt into a cache hit
and a measurement of prefill into one of a cache lookup. So unless the user asks for the same
prompt (`--same-prompt`), every request's prompt starts with a reference made of a per-run
nonce from `os.urandom` and the request's number: unique within a run and across runs, while
the content after it stays deterministic. The exact token length includes that reference.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from specscope.probe.prompts import (
    AsyncCounter,
    BuiltPrompt,
    Cut,
    Frame,
    PromptError,
    fit_units,
    normalized,
    render,
    synthetic_frame,
)
from specscope.probe.workloads.categories import CATEGORIES, CODE_COMPLETION, CODE_EDIT
from specscope.probe.workloads.files import FilePrompt, WorkloadError, load_file

SYNTHETIC = "synthetic"
MIXED = "mixed"
# The mix in request order. Free-form and reasoning text first: the seed story's case, and the
# one a single-request probe then measures.
MIXED_ORDER = (
    "long-writing",
    "reasoning",
    "chat",
    "summarisation",
    "multi-turn",
    "code-completion",
    "code-edit",
)
DEFAULT_WORKLOAD = MIXED
BUILT_IN = (MIXED, *CATEGORIES, SYNTHETIC)

__all__ = [
    "BUILT_IN",
    "DEFAULT_WORKLOAD",
    "PromptSource",
    "Workload",
    "WorkloadError",
    "resolve_workload",
    "run_nonce",
]


def run_nonce() -> str:
    """Eight decimal digits from the OS's randomness: never derived from a tag or a seed, so a
    second run with the same arguments sends different prompts. Digits, because most modern
    tokenizers split them one by one (or in fixed groups), so every run's reference has the
    same token count and the content cut after it is the same from run to run."""
    return f"{int.from_bytes(os.urandom(4), 'big') % 10**8:08d}"


@dataclass(frozen=True)
class Workload:
    name: str
    categories: tuple[str, ...] = ()  # built-in categories, in request order
    file_prompts: tuple[FilePrompt, ...] = ()
    source: str = "built-in"

    @property
    def primary(self) -> str:
        """The category a single-shape experiment uses (diagnose's plan): the first one."""
        if self.file_prompts:
            return self.file_prompts[0].category
        return self.categories[0]

    @property
    def category_names(self) -> tuple[str, ...]:
        if self.file_prompts:
            return tuple(dict.fromkeys(p.category for p in self.file_prompts))
        return self.categories

    def describe(self) -> str:
        if self.file_prompts:
            return f"{self.name} ({len(self.file_prompts)} prompts from {self.source})"
        return f"{self.name} ({', '.join(self.categories)})"


def resolve_workload(spec: str | Path | None) -> Workload:
    """A built-in name, else a file path; a WorkloadError (exit 2) otherwise."""
    name = str(spec) if spec is not None else DEFAULT_WORKLOAD
    if name == MIXED:
        return Workload(MIXED, MIXED_ORDER)
    if name == SYNTHETIC:
        return Workload(SYNTHETIC, (SYNTHETIC,))
    if name in CATEGORIES:
        return Workload(name, (name,))
    path = Path(name).expanduser()
    if not path.exists():
        raise WorkloadError(
            f"--workload: {name!r} is neither a built-in workload "
            f"({', '.join(BUILT_IN)}) nor an existing file"
        )
    if path.is_dir():
        raise WorkloadError(f"--workload {name}: is a directory, expected a JSONL file")
    prompts = load_file(path)
    if not prompts:
        raise WorkloadError(f"--workload {name}: no prompts in the file")
    return Workload(path.name, file_prompts=tuple(prompts), source=str(path))


#: A file's text is repeated until it has this many characters per asked token (no tokenizer
#: needs more), so a length past the file's own (a context sweep) can still be cut exactly.
CHARS_PER_TOKEN_BOUND = 8


def _file_frame(prompts: tuple[FilePrompt, ...], seed: int, n_tokens: int = 0) -> Frame:
    """The lines of the file's prompts from the seed-th on, as one text to cut (going round
    the file again when it is shorter than `n_tokens` could need)."""
    lines: list[str] = []
    chars, k = 0, 0
    while k < len(prompts) or chars < CHARS_PER_TOKEN_BOUND * n_tokens:
        fp = prompts[(seed + k) % len(prompts)]
        text = fp.text if fp.text is not None else render_messages(fp.messages or ())
        part = [*text.rstrip().splitlines(keepends=True), "\n\n"]
        lines += part
        chars += sum(map(len, part))
        k += 1
    return Frame(head="", units=lines, tail="", unit_kind="line")


def _frame(category: str, seed: int, n_tokens: int) -> Frame:
    if category == SYNTHETIC:
        return synthetic_frame(seed, n_tokens)
    return CATEGORIES[category](seed)


def render_messages(messages: tuple[tuple[str, str], ...]) -> str:
    """A conversation as plain text for a completions endpoint, ending where the assistant
    answers."""
    names = {"user": "User", "assistant": "Assistant", "system": "System"}
    body = "".join(f"{names.get(r, r.title())}: {t}\n\n" for r, t in messages)
    return body + "Assistant:"


@dataclass
class PromptSource:
    """The prompts of one run. `prompt()` is called once per request: it returns real text of
    exactly `n_tokens` tokens (by `count`, the server's tokenizer where it has one) whose
    content is chosen by (category, seed) and whose first line is unique to this request,
    unless `unique` is False. Fitting a (category, seed, length) is cached, so the per-request
    reference costs one or two counts."""

    count: AsyncCounter | None
    workload: Workload
    unique: bool = True
    #: File prompts cut to the asked length too (their lines, continuing into the next
    #: prompts): for experiments whose point is the context length; else used as given.
    fit_files: bool = False
    nonce: str = field(default_factory=run_nonce)
    issued: int = 0
    _cuts: dict[tuple[str, int, int], Cut] = field(default_factory=dict)

    def category_for(self, index: int) -> tuple[str, int]:
        """(category, content seed) of the index-th request in round-robin order."""
        cats = self.workload.categories
        return cats[index % len(cats)], index // len(cats)

    def _reference(self, category: str) -> str:
        if not self.unique:
            return ""
        tag = f"[{self.nonce}.{self.issued:04d}]"  # fixed width: the same token count
        return f"# {tag}\n" if category in (CODE_COMPLETION, CODE_EDIT) else f"{tag}\n"

    async def prompt(self, n_tokens: int, seed: int, category: str | None = None) -> BuiltPrompt:
        """A prompt for one request. Built-in workloads: `category` (default: round-robin by
        `seed`) at exactly `n_tokens`. File workloads: the `seed`-th prompt, as given (with
        `fit_files`, its lines cut to exactly `n_tokens`)."""
        try:
            if self.workload.file_prompts and not self.fit_files:
                return await self._file_prompt(seed)
            if self.workload.file_prompts:
                category = self.workload.file_prompts[
                    seed % len(self.workload.file_prompts)
                ].category
            elif category is None:
                category, seed = self.category_for(seed)
            if self.count is None:
                raise PromptError("no way to count prompt tokens")
            key = (category, seed, n_tokens)
            frame = (
                _file_frame(self.workload.file_prompts, seed, n_tokens)
                if self.workload.file_prompts
                else _frame(category, seed, n_tokens)
            )
            prefix, hint = self._reference(category), self._cuts.get(key)
            try:
                built, cut = await fit_units(self.count, frame, n_tokens, prefix=prefix, hint=hint)
            except PromptError:
                if hint is None:
                    raise
                # The counter stopped answering (a server going down): the cut found before,
                # under a reference of the same width, with its length marked unverified, so
                # the request itself goes out and its failure is recorded as the server's.
                built = BuiltPrompt(
                    render(normalized(frame), hint, prefix), None, False, boundary=frame.unit_kind
                )
                cut = hint
            if not built.exact and prefix.startswith("# "):
                # A length shorter than a code comment's reference: the bare reference.
                built, cut = await fit_units(self.count, frame, n_tokens, prefix=prefix[2:])
            self._cuts.setdefault(key, cut)
            built.category = category
            return built
        finally:
            self.issued += 1

    async def _file_prompt(self, seed: int) -> BuiltPrompt:
        fp = self.workload.file_prompts[seed % len(self.workload.file_prompts)]
        ref = self._reference(fp.category)
        if fp.messages is not None:
            msgs = list(fp.messages)
            role, content = msgs[0]
            msgs[0] = (role, ref + content)
            text = render_messages(tuple(msgs))
            messages = [{"role": r, "content": c} for r, c in msgs]
        else:
            text, messages = ref + (fp.text or ""), None
        n = await self.count(text) if self.count is not None else None
        return BuiltPrompt(text, n, True, category=fp.category, boundary="whole", messages=messages)

    async def prompts(self, n_tokens: int, n: int, start: int = 0) -> list[BuiltPrompt]:
        """`n` prompts in request order from request `start` (round-robin over the
        categories); with `unique` False, the same prompt for every request (built once)."""
        if not self.unique:
            one = await self.prompt(n_tokens, 0)
            return [one] * n
        return [await self.prompt(n_tokens, i) for i in range(start, start + n)]
