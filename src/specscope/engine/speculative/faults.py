"""Drafter faults: real mechanisms that break speculation in a known way, switched on by
`specscope serve --backend engine --fault NAME` (docs/faults.md) so that a diagnosis can be
checked against a cause known in advance.

- `spec-no-accept`: the drafter's token ids are off by one against the target's vocabulary (a
  drafter/target tokenizer mismatch). Drafts are proposed and verified at full cost, and
  almost never accepted: speculation that only costs.
- `prompt-only-ngram`: the n-gram index is built from the prompt at prefill and never updated
  with the generated text. Early in a generation the output still follows the prompt and the
  lookup finds it; further on the output has left the prompt behind and drafts stop matching:
  acceptance that falls with output position for a real reason.
- `draft-budget=N`: at most N drafted tokens are verified per step across the whole batch,
  shared evenly: each of B requests keeps the first N // B tokens of its draft (none once B > N).
  A server whose per-step token budget truncates speculative tokens under load does this (vLLM's
  scheduler cuts a request's spec tokens to what its `max_num_batched_tokens` budget has left):
  at concurrency 1 the drafts are whole, in a batch they shrink, and tokens per step fall with
  the batch while a step costs no more (it verifies fewer tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from specscope.engine.speculative.drafter import Draft, Drafter, DraftRequest
from specscope.engine.speculative.ngram import NgramDrafter

# The drafter faults by name, and what each does (--help, docs/faults.md).
FAULT_HELP = {
    "spec-no-accept": "drafter ids off by one against the target's: drafts almost never accepted",
    "prompt-only-ngram": "n-gram index of the prompt only, never of the generated text",
    "draft-budget": "=N drafted tokens verified per step, shared by the batch: each of B "
    "requests keeps N // B",
}
# The drafter faults that take a value (`NAME=VALUE`); the others take none.
VALUED = ("draft-budget",)


def fault_value(spec: str) -> tuple[str, str | None]:
    """`NAME[=VALUE]` as (name, value or None)."""
    name, eq, value = spec.partition("=")
    return name, (value if eq else None)


def check_drafter_faults(specs: Sequence[str]) -> None:
    """ValueError (one line) on a drafter fault that is unknown, lacks its value or has one it
    does not take."""
    for spec in specs:
        name, value = fault_value(spec)
        if name not in FAULT_HELP:
            raise ValueError(f"unknown engine fault(s) {[spec]} (known: {list(FAULT_HELP)})")
        if name in VALUED:
            budget_of(spec)
        elif value is not None:
            raise ValueError(f"--fault {name} takes no value, got {spec!r}")


def positive_int(name: str, value: str | None, what: str) -> int:
    """`--fault NAME=N`'s N as an int >= 1, or ValueError naming the fault and the bad value."""
    try:
        n = int(value) if value is not None else 0
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--fault {name}=N needs {what} >= 1, got {value!r}")
    return n


def budget_of(spec: str) -> int:
    """`draft-budget=N`'s N: drafted tokens verified per step across the batch."""
    return positive_int(*fault_value(spec), "drafted tokens per step")


@dataclass
class VocabOffsetDrafter:
    """Every drafted id shifted by one (modulo the vocabulary): the `spec-no-accept` fault."""

    inner: Drafter
    vocab_size: int
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or self.inner.name

    def _shift(self, ids: np.ndarray) -> np.ndarray:
        return (np.asarray(ids, dtype=np.int64) + 1) % self.vocab_size

    def propose(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        out = []
        for d in self.inner.propose(requests):
            sequences = [self._shift(s).tolist() for s in d.sequences]
            topk = None if d.topk_tokens is None else self._shift(d.topk_tokens)
            out.append(replace(d, sequences=sequences, topk_tokens=topk))
        return out

    def release(self, request_id: str) -> None:
        self.inner.release(request_id)

    def __getattr__(self, attr: str):  # observe() and the like, when the inner drafter has them
        return getattr(self.inner, attr)


@dataclass
class BatchBudgetDrafter:
    """Drafts cut to a per-step budget shared by the batch: the `draft-budget=N` fault. The
    inner drafter proposes as usual (its own state stays in step); each request then keeps the
    first N // B tokens of its draft, B the requests drafted for in this step, so what is
    verified, and so what can be accepted, shrinks as the batch grows."""

    inner: Drafter
    budget: int
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or self.inner.name

    def share(self, batch: int) -> int:
        """Drafted tokens each of `batch` requests keeps this step."""
        return self.budget // max(1, batch)

    def propose(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        k = self.share(len(requests))
        out = []
        for d in self.inner.propose(requests):
            if k == 0:
                out.append(Draft())  # the budget is spent: this request verifies no draft
                continue
            out.append(
                replace(
                    d,
                    sequences=[list(s)[:k] for s in d.sequences],
                    topk_tokens=None if d.topk_tokens is None else d.topk_tokens[:k],
                    topk_logprobs=None if d.topk_logprobs is None else d.topk_logprobs[:k],
                    q_probs=None if d.q_probs is None else d.q_probs[:k],
                )
            )
        return out

    def release(self, request_id: str) -> None:
        self.inner.release(request_id)

    def __getattr__(self, attr: str):  # observe() and the like, when the inner drafter has them
        return getattr(self.inner, attr)


@dataclass
class PromptOnlyNgramDrafter(NgramDrafter):
    """n-gram lookup whose index holds the prompt only: the `prompt-only-ngram` fault. The
    prompt's length is what the first draft request of a request holds (prefill's tokens and
    the first sampled one)."""

    _prompt_len: dict[str, int] = field(default_factory=dict)

    def propose(self, requests: Sequence[DraftRequest]) -> list[Draft]:
        drafts = []
        for r in requests:
            indexed = self._prompt_len.setdefault(r.request_id, len(r.tokens) - 1)
            drafts.append(Draft(sequences=self.lookup_in(r.tokens, indexed, r.num_draft_tokens)))
        return drafts

    def release(self, request_id: str) -> None:
        self._prompt_len.pop(request_id, None)

    def lookup_in(self, tokens: Sequence[int], indexed: int, k: int) -> list[list[int]]:
        """Continuations of the text's last n-gram where it occurs inside the first `indexed`
        tokens (the prompt), longest n-gram first."""
        seq = np.asarray(tokens, dtype=np.int64)
        found: list[list[int]] = []
        prompt = seq[:indexed]
        for n in range(min(self.max_ngram, len(prompt) - 1), self.min_ngram - 1, -1):
            suffix = seq[len(seq) - n :]
            windows = np.lib.stride_tricks.sliding_window_view(prompt[:-1], n)
            for i in np.flatnonzero((windows == suffix).all(axis=1))[::-1]:
                cont = prompt[i + n : i + n + k].tolist()
                if cont and cont not in found:
                    found.append(cont)
                    if len(found) >= self.num_candidates:
                        return found
        return found


def with_faults(drafter: Drafter, faults: Sequence[str], vocab_size: int) -> Drafter:
    """The drafter with the named faults applied (`prompt-only-ngram` replaces an n-gram
    drafter's index; `spec-no-accept` and `draft-budget=N` wrap any drafter)."""
    check_drafter_faults(faults)
    if "prompt-only-ngram" in faults:
        if not isinstance(drafter, NgramDrafter):
            raise ValueError("--fault prompt-only-ngram needs the n-gram drafter (--drafter ngram)")
        drafter = PromptOnlyNgramDrafter(
            drafter.min_ngram, drafter.max_ngram, drafter.num_candidates, drafter.draft_window
        )
    if "spec-no-accept" in faults:
        drafter = VocabOffsetDrafter(drafter, vocab_size)
    for spec in faults:
        if fault_value(spec)[0] == "draft-budget":
            drafter = BatchBudgetDrafter(drafter, budget_of(spec))
    return drafter
