"""experiments.precision_loop against the twin behind a real HTTP server: the full generation is
repeated until decode tps is known to the precision asked, or the budget stops it; a noisier
server takes more requests; a Ctrl-C mid-loop keeps every request. Short requests and a small
time scale keep each test to seconds; every loop is bounded by its budget and request cap."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace

from specscope.analysis.headline import precision as pr
from specscope.analysis.headline.uncertainty import MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP as MIN_REQ
from specscope.experiments import Executor, full_generation
from specscope.experiments.plan import FINISH_S, PrecisionPlan
from specscope.experiments.precision_loop import PrecisionOutcome, repeat_until_precise
from specscope.experiments.probe_target import open_target
from specscope.trace import RunDirWriter, RunInfo, load_run, tags
from specscope.twin import scenario as tw
from specscope.validation import power as pw

PROMPT, TOKENS = 64, 100


def _plan(
    target: float,
    *,
    budget_s: float | None = 60.0,
    budget_tokens: int | None = None,
    max_requests: int = 40,
    tokens: int = TOKENS,
):
    plan = full_generation.plan(PROMPT, tokens)
    plan.precision = PrecisionPlan(
        target, budget_s, budget_tokens, max_requests, 1, tags.FULL_GENERATION
    )
    return plan


async def _loop(
    url: str,
    plan,
    writer: RunDirWriter | None = None,
    outcome: PrecisionOutcome | None = None,
    started: float | None = None,
):
    async with open_target(url) as target:
        ex = Executor(target, writer)
        result = await ex.run(plan)
        out = await repeat_until_precise(ex, plan, result, outcome, started=started)
        return out, result


def _scenario(request_sigma: float, step_s: float = 0.01) -> tw.Scenario:
    """Steps of `step_s` (shorter than ~10 ms are timed mostly by the loaded machine's
    scheduling, noise of its own), ~4.5 tokens each; `request_sigma` moves each request's
    acceptance (content: some prompts are easier to draft)."""
    return pw.with_tables(
        tw.load_scenario("healthy"),
        acceptance={"request_sigma": request_sigma},
        step={
            "s0": step_s,
            "per_context_token": 0.0,
            "per_verified_token": 0.0,
            "noise_sigma": 0.05,
        },
        prefill={"s0": 0.005, "per_prompt_token": 0.0},
    )


def test_stops_when_narrow_enough(twin_server):
    # 30 ms steps keep a loaded machine's jitter small beside them; the minimum is then enough
    # on an idle machine. Where the machine's own noise made the first requests wider than
    # asked, the loop must have gone on for that reason, and only for it.
    srv = twin_server(_scenario(0.0, step_s=0.03))
    out, result = asyncio.run(_loop(srv.url, _plan(0.25)))
    assert out.stopped_by == pr.PRECISION, out
    assert out.requests == len(result.traces) >= MIN_REQ
    assert out.over_requests and out.reached is not None and out.reached <= 0.25
    # what the outcome says it reached is the interval the analysis prints
    assert out.reached == pr.reading(result.traces).relative_half_width
    if out.requests == MIN_REQ:
        assert out.added_requests == MIN_REQ - 1 and out.rounds == 1
    else:
        # the minimum was not narrow enough by the stop rule's two widths (the bootstrap's and
        # Student's t over the requests: with 8 requests the t interval can be the wider one)
        first = pr.reading(result.traces[:MIN_REQ])
        widths = (first.relative_half_width, first.t_half_width)
        assert any(w is not None and w > 0.25 for w in widths), (widths, out)


def test_stops_on_the_budget(twin_server):
    srv = twin_server(_scenario(0.0))
    out, result = asyncio.run(_loop(srv.url, _plan(0.10, budget_tokens=3 * TOKENS)))
    assert out.stopped_by == pr.BUDGET, out
    assert out.added_requests == 3 and len(result.traces) == 4
    assert out.spent_tokens == 3 * TOKENS and out.needed >= MIN_REQ
    assert not out.over_requests  # 4 requests: not yet an interval over requests
    out, result = asyncio.run(_loop(srv.url, _plan(0.10, budget_s=0.0)))
    assert out.stopped_by == pr.BUDGET and out.added_requests == 0 and len(result.traces) == 1


def test_a_deadline_gives_the_repeats_what_the_command_has_left(twin_server):
    """--quick: the repeats may spend what the command's deadline leaves once the analysis'
    seconds are set aside, counted from the command's start."""
    srv = twin_server(_scenario(0.0))
    plan = _plan(0.10, budget_s=120.0)
    plan.precision = replace(plan.precision, deadline_s=90.0)
    # the command started 88 s ago: nothing left for a repeat
    out, result = asyncio.run(_loop(srv.url, plan, started=time.monotonic() - 88.0))
    assert out.stopped_by == pr.BUDGET and out.added_requests == 0 and len(result.traces) == 1
    assert out.budget_s == 0.0
    # started just now: the budget is the deadline less the analysis' share, below --budget-s'
    out, _ = asyncio.run(_loop(srv.url, plan, started=time.monotonic()))
    assert 90.0 - FINISH_S - 10.0 < out.budget_s <= 90.0 - FINISH_S


def test_a_noisier_server_takes_more_requests(twin_server):
    # 30 ms steps: a loaded machine's jitter stays small beside them. request_sigma 3: at 1.5 the
    # noisy server's first 8 requests read within +-20% in 1 run of 20 (random prompts), and the
    # loop rightly stopped there; at 3 its half-width over 16 requests was 0.29-0.47 in 30 of 30.
    quiet = twin_server(_scenario(0.0, step_s=0.03))
    noisy = twin_server(_scenario(3.0, step_s=0.03))
    q, _ = asyncio.run(_loop(quiet.url, _plan(0.2, max_requests=16, tokens=60)))
    n, _ = asyncio.run(_loop(noisy.url, _plan(0.2, max_requests=16, tokens=60)))
    assert q.stopped_by == pr.PRECISION, q
    assert n.requests > q.requests and n.needed > MIN_REQ, (q, n)
    assert n.stopped_by in (pr.PRECISION, pr.MAX_REQUESTS), n


def test_off_runs_the_plan_only(twin_server):
    srv = twin_server(_scenario(0.0))
    out, result = asyncio.run(_loop(srv.url, _plan(0.0)))
    assert out.stopped_by == pr.OFF and out.added_requests == 0 and len(result.traces) == 1


def test_ctrl_c_mid_loop_keeps_every_request(twin_server, tmp_path):
    srv = twin_server(_scenario(0.0))  # ~0.3 s a request: time to cancel
    plan = _plan(0.01, max_requests=30)
    writer = RunDirWriter(tmp_path / "run", RunInfo(kind="diagnose", endpoint=srv.url))
    outcome = PrecisionOutcome(plan.precision.target)

    async def go():
        task = asyncio.ensure_future(_loop(srv.url, plan, writer, outcome))
        for _ in range(1500):  # at most 30 s: the plan's request and two repeats are recorded
            if _recorded(writer) >= 3 or task.done():
                break
            await asyncio.sleep(0.02)
        assert not task.done(), task
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert outcome.stopped_by is None  # the loop did not end by itself
    record = outcome.closed(interrupted=True, stopped_reason=None)
    assert record["stopped_by"] == pr.INTERRUPTED
    writer.info.precision = record
    writer.close("partial", "interrupted (Ctrl-C)")
    run = load_run(tmp_path / "run")
    assert len(run.requests) >= 3
    assert [r.index for r in run.requests] == list(range(len(run.requests)))
    assert run.info.precision["stopped_by"] == pr.INTERRUPTED
    kinds = {r.error.kind for r in run.requests if r.error is not None}
    assert kinds <= {"cancelled"}  # the one in flight is kept as cancelled, nothing lost


def _recorded(writer: RunDirWriter) -> int:
    path = writer.path / "requests.jsonl"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def test_a_measurement_without_a_decode_window_is_tried_again_then_given_up(twin_server):
    """A server that sends each generation whole (one SSE event at the end) leaves no request a
    decode window: the loop tries NO_WINDOW_TRIES requests in all (a merge of a moment passes),
    then stops on NO_DATA, well inside its budget and cap."""
    srv = twin_server(_scenario(0.0), stream_interval=10 * TOKENS)
    out, result = asyncio.run(_loop(srv.url, _plan(0.25)))
    assert all(t.ok and len(t.reads()) == 1 for t in result.traces), result.traces
    assert out.stopped_by == pr.NO_DATA, out
    assert len(result.traces) == pr.NO_WINDOW_TRIES and out.added_requests == pr.NO_WINDOW_TRIES - 1
    assert out.requests == 0 and f"{pr.NO_WINDOW_TRIES} tried" in out.reason
