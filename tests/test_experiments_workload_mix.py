"""The diagnosis plan's workload mix, and the executor asking the target per request."""

from __future__ import annotations

import asyncio

from specscope.experiments import Executor, diagnosis_plan
from specscope.experiments.target import Prompt
from specscope.trace import RequestSpec, RequestTrace


class _Recorder:
    """A target that records every prompt request and answers instantly."""

    def __init__(self):
        self.asked: list[tuple[int, int, str | None]] = []

    async def prompt(self, n_tokens: int, seed: int = 0, category: str | None = None) -> Prompt:
        self.asked.append((n_tokens, seed, category))
        return Prompt(f"[{len(self.asked)}] {category or 'primary'} {n_tokens}", category or "x")

    async def send(self, spec: RequestSpec, index: int = 0, slot: int = 0) -> RequestTrace:
        return RequestTrace(index=index, spec=spec, t_send_ns=0, t_end_ns=1, concurrency_slot=slot)

    def describe(self):
        return {}


def test_plan_ends_with_one_request_per_category_only_for_a_mix():
    cats = ["long-writing", "reasoning", "code-edit"]
    plan = diagnosis_plan.build(1024, 512, quick=True, categories=cats)
    mix = [s for s in plan.steps if s.experiment == "workload_mix"]
    assert [s.category for s in mix] == cats and [s.point for s in mix] == cats
    assert all(s.prompt_tokens == 512 and s.max_tokens == 128 for s in mix)
    assert any("workload mix" in n for n in plan.notes)
    assert not [
        s
        for s in diagnosis_plan.build(1024, 512, quick=True, categories=["chat"]).steps
        if s.experiment == "workload_mix"
    ]


def test_executor_asks_a_prompt_per_request_and_copies_the_category():
    plan = diagnosis_plan.build(300, 64, quick=True, categories=["chat", "reasoning"])
    target = _Recorder()
    result = asyncio.run(Executor(target, None).run(plan))
    assert result.complete
    # every shape fitted first, then one prompt per request
    assert len(target.asked) == len(plan.steps) + plan.total_requests
    prompts = [t.spec.prompt for t in result.traces]
    assert len(set(prompts)) == len(prompts)
    tp = [t for t in result.traces if t.spec.tag.startswith("two_point")]
    # the same content for every experiment (two-point vs full generation compares shapes)
    assert tp and {s for _, s, _ in target.asked} == {0}
    mix = {
        t.spec.tag: t.spec.category for t in result.traces if t.spec.tag.startswith("workload_mix")
    }
    assert mix == {"workload_mix:chat": "chat", "workload_mix:reasoning": "reasoning"}
