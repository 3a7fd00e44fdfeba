"""Experiments: plans are bounded and state every skip; the executor sends exactly the plan to a
real twin server, tags each request, shares one prompt across a two-point pair, appends every
request to the run dir, and stops a run against a dead server instead of hanging."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from specscope.experiments import (
    Executor,
    concurrency_sweep,
    context_sweep,
    diagnosis_plan,
    full_generation,
    output_sweep,
    two_point,
)
from specscope.experiments.plan import FINISH_S
from specscope.experiments.precision_loop import expected_repeats_s, repeats_budget_s
from specscope.experiments.probe_target import TargetError, open_target
from specscope.trace import RunDirWriter, RunInfo, load_run


def test_default_plan_is_the_seed_method_at_the_users_shape():
    plan = diagnosis_plan.build(2700, 1500)
    tags = [s.tag for s in plan.steps]
    assert tags[0] == "full_generation"
    assert plan.steps[0].prompt_tokens == 2700 and plan.steps[0].max_tokens == 1500
    assert tags.count("two_point:n1") == tags.count("two_point:n2") == 3
    assert any(t.startswith("context_sweep:") for t in tags)
    assert "output_sweep:1500" in tags
    # context sweep spans the range the generation covers (prompt .. prompt + output)
    ctx = sorted(int(t.split(":")[1]) for t in tags if t.startswith("context_sweep:"))
    assert ctx[0] < 2700 < ctx[-1] and ctx[-1] == 4200
    assert plan.total_requests == len(plan.steps) and plan.estimate_s() > 0
    assert plan.skipped == []


def test_points_beyond_the_context_are_skipped_with_the_reason_not_shrunk():
    plan = diagnosis_plan.build(2700, 1500, max_context=4096)
    assert "full_generation" not in [s.tag for s in plan.steps]
    skipped = {k.experiment + (":" + k.point if k.point else "") for k in plan.skipped}
    assert "full_generation" in skipped and "context_sweep:4200" in skipped
    assert all("exceeds the server's context of 4096" in k.reason for k in plan.skipped)
    assert all(s.prompt_tokens + s.max_tokens <= 4096 for s in plan.steps)
    assert plan.to_dict()["skipped"]


def test_quick_plan_states_its_trims():
    quick = diagnosis_plan.build(2700, 1500, quick=True)
    assert quick.steps[0].max_tokens == 1500  # the user's case is never trimmed
    assert any("--quick" in n for n in quick.notes)
    assert quick.total_generated_tokens < diagnosis_plan.build(2700, 1500).total_generated_tokens


def test_a_stated_window_inside_the_span_gets_prompts_on_each_side():
    plan = diagnosis_plan.build(2700, 1500, quick=True, draft_window=1024)
    spans = [
        (s.prompt_tokens, s.prompt_tokens + s.max_tokens)
        for s in plan.steps
        if s.experiment == "context_sweep"
    ]
    assert sum(end <= 1024 for _, end in spans) >= 2  # whole requests below the window
    assert sum(start > 1024 for start, _ in spans) >= 3
    default = context_sweep.default_points(2700, 1500, quick=True)
    assert set(default) <= {start for start, _ in spans}
    assert any("draft window" in s.purpose for s in plan.steps)
    # a window the generation never reaches, or none stated: the default sweep
    for window in (None, 4200, 8192):
        plan = diagnosis_plan.build(2700, 1500, quick=True, draft_window=window)
        starts = [s.prompt_tokens for s in plan.steps if s.experiment == "context_sweep"]
        assert starts == default


def test_experiment_modules_validate_their_parameters():
    with pytest.raises(ValueError, match="n2 > n1"):
        two_point.plan(100, n1=64, n2=64)
    with pytest.raises(ValueError):
        concurrency_sweep.plan([0], 128, 64)
    assert [s.concurrency for s in concurrency_sweep.plan([1, 2, 4], 128, 64).steps] == [1, 2, 4]
    assert full_generation.plan(100, 50, repeat=3).steps[0].requests == 3
    assert context_sweep.plan([100, 200], 16, max_context=150).skipped[0].point == "200"
    assert output_sweep.plan([64]).steps[0].prompt_tokens == output_sweep.SHORT_PROMPT_TOKENS


def test_executor_runs_the_plan_against_a_real_server(twin_server, tmp_path):
    srv = twin_server("healthy", time_scale=0.5)
    plan = two_point.plan(200, n1=16, n2=48, repeat=2)
    plan.extend(concurrency_sweep.plan([2], prompt_tokens=64, max_tokens=16))
    events = []

    async def go():
        async with open_target(srv.url) as target:
            desc = target.describe()
            writer = RunDirWriter(tmp_path / "run", RunInfo(kind="two_point", endpoint=srv.url))
            result = await Executor(target, writer, on_progress=events.append).run(plan)
            writer.close("complete")
            return desc, result

    desc, result = asyncio.run(go())
    assert desc["flavor"] == "sglang" and desc["max_context"] == 32768
    assert result.complete and not result.errors
    assert len(result.traces) == plan.total_requests == 6
    run = load_run(tmp_path / "run")
    assert [r.index for r in run.requests] == list(range(6))
    assert [r.spec.tag for r in run.requests][:4] == ["two_point:n1", "two_point:n2"] * 2
    pair = run.by_tag("two_point")
    # The pair shares its content, but no request shares a cacheable prefix with another:
    # each prompt starts with its own reference line.
    assert len({r.spec.prompt.split("\n", 1)[1] for r in pair}) == 1
    assert len({r.spec.prompt for r in run.requests}) == 6
    assert len({r.spec.prompt.split("\n", 1)[0] for r in run.requests}) == 6
    assert all(r.spec.prompt_tokens == 200 for r in pair)
    assert {r.spec.category for r in pair} == {"long-writing"}
    assert all(r.completion_tokens == r.spec.max_tokens for r in run.requests)
    assert sorted(r.concurrency_slot for r in run.by_tag("concurrency_sweep")) == [0, 1]
    done = [e for e in events if e.last is not None]
    assert len(done) == 6 and done[-1].requests_done == 6
    assert done[-1].tokens_done == plan.total_generated_tokens


def test_executor_stops_against_a_dead_server(twin_server, tmp_path):
    srv = twin_server("healthy", time_scale=0.5)
    plan = full_generation.plan(64, 16, repeat=10)

    async def go():
        async with open_target(srv.url) as target:
            ex = Executor(target, None, max_consecutive_errors=3)
            first = await ex.run_step(replace(plan.steps[0], repeat=1))
            srv.stop()  # every request (and every tokenize call) now fails
            return first, await ex.run(plan)

    first, result = asyncio.run(go())
    assert first[0].error is None
    # A prompt whose content was fitted before is still sent when the tokenizer stops answering
    # (its length unverified), so the dead server shows as failed requests.
    assert not result.complete and "server stopped answering" in (result.stopped_reason or "")
    assert len(result.traces) == 3 and all(t.error is not None for t in result.traces)


def test_unreachable_target_is_a_clear_error():
    async def go():
        async with open_target("http://127.0.0.1:9"):
            pass

    with pytest.raises(TargetError, match="not reachable"):
        asyncio.run(go())


def test_quick_bounds_its_repeats_by_the_commands_time_and_says_so():
    quick = diagnosis_plan.build(2700, 1500, quick=True)
    assert quick.precision is not None
    assert quick.precision.deadline_s == diagnosis_plan.QUICK_DEADLINE_S
    assert any("about 90 s in all" in n for n in quick.notes)
    # --budget-s is the user's own bound on the repeats: no deadline then
    own = diagnosis_plan.build(2700, 1500, quick=True, budget_s=30)
    assert own.precision is not None and own.precision.deadline_s is None
    assert not any("in all" in n for n in own.notes)
    full = diagnosis_plan.build(2700, 1500)
    assert full.precision is not None and full.precision.deadline_s is None


def test_the_estimate_covers_the_whole_command():
    plan = diagnosis_plan.build(2700, 1500, quick=True)
    plan.calibrate(100.0, 5000.0)
    plan.elapsed_s, plan.repeats_s = 3.0, 20.0
    total = plan.total_estimate_s()
    assert total == pytest.approx(3.0 + plan.estimate_s() + 20.0 + FINISH_S)
    d = plan.to_dict()
    assert d["estimated_total_s"] == round(total, 1)
    assert d["estimated_repeats_s"] == 20.0 and d["elapsed_at_plan_s"] == 3.0
    assert d["precision"]["deadline_s"] == diagnosis_plan.QUICK_DEADLINE_S


def test_repeats_get_what_the_deadline_leaves():
    plan = diagnosis_plan.build(2700, 1500, quick=True)
    pp = plan.precision
    assert pp is not None
    # 30 s into the command, 90 s in all: the repeats may spend 90 - 30 - FINISH_S
    assert repeats_budget_s(pp, 30.0) == pytest.approx(90.0 - 30.0 - FINISH_S)
    assert repeats_budget_s(pp, 200.0) == 0.0  # past it: none
    no_deadline = replace(pp, deadline_s=None)
    assert repeats_budget_s(no_deadline, 200.0) == pp.budget_s


def test_expected_repeats_are_the_minimum_the_loop_needs_within_its_budget():
    plan = diagnosis_plan.build(2700, 1500, quick=True)
    # a fast server: the 7 requests the loop needs before it can stop on precision all fit
    plan.calibrate(1000.0, 100_000.0)
    plan.elapsed_s = 1.0
    one = replace(plan.steps[0], repeat=1).estimate_s(1000.0, 100_000.0)
    assert expected_repeats_s(plan) == pytest.approx(7 * one)
    # a slow one: the steps leave too little of the 90 s for one more generation
    plan.calibrate(20.0, 2000.0)
    assert plan.elapsed_s + plan.estimate_s() + FINISH_S > diagnosis_plan.QUICK_DEADLINE_S
    assert expected_repeats_s(plan) == 0.0
    plan.precision = replace(plan.precision, target=0.0)  # --precision 0: no repeats
    assert expected_repeats_s(plan) == 0.0
