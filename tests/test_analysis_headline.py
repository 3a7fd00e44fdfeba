"""The headline's one precedence, and server data as evidence: vLLM's real shapes replayed
(reference/vllm-cpu.md §7). A code prompt, 256 tokens: the stream shows 101 verify steps after the
prefill chunk; vLLM's `per_step_accepted` lists only the 61 that drafted something and counts 4
accepted drafts on the last step, which max_tokens cut to 2 tokens. All-steps truth 255/101 = 2.525;
vLLM's own per-drafted-step figure 218/61 = 3.574 (215/61 = 3.525 with the last step capped)."""

from __future__ import annotations

import numpy as np
import pytest

from specscope.analysis.diagnosis.diagnose import analyze
from specscope.analysis.headline.headline import headline
from specscope.analysis.headline.uncertainty import median_interval, totals_intervals, unit_rows
from specscope.analysis.steps.reconstruct import reconstruct_steps
from specscope.analysis.steps.server import (
    DRAFTED_STEPS,
    EVERY_STEP,
    INCONSISTENT,
    check_server_steps,
)
from specscope.analysis.summary import summarize
from specscope.telemetry.records import SpecRecord
from specscope.trace.model import Chunk, RequestSpec, RequestTrace, Run, RunInfo, ServerSpecFields

MS = 1_000_000
STEP_MS = 135.5  # vLLM's all-steps mean step time on that run


def vllm_steps(seed: int = 0) -> tuple[list[int], list[bool]]:
    """101 steps: 40 plain one-token steps (no n-gram match) and 61 drafted ones committing 215
    tokens (the last drafted step is the final one, cut to 2 tokens by max_tokens)."""
    rng = np.random.default_rng(seed)
    drafted_commits = [5] * 31 + [4] * 4 + [3] * 4 + [2] * 9 + [1] * 12  # 60 steps, 213 tokens
    rng.shuffle(drafted_commits)
    kinds = [True] * 60 + [False] * 40
    rng.shuffle(kinds)
    commits, drafted, it = [], [], iter(drafted_commits)
    for k in kinds:
        commits.append(next(it) if k else 1)
        drafted.append(k)
    commits.append(2)  # the last step: drafted, accepted 4, max_tokens left 2
    drafted.append(True)
    assert sum(commits) == 255 and len(commits) == 101 and sum(drafted) == 61
    return commits, drafted


def vllm_trace(
    index: int = 0, *, coalesce: int = 1, seed: int = 0, step_ms: float = STEP_MS
) -> RequestTrace:
    commits, drafted = vllm_steps(seed)
    accepted = [c - 1 for c, d in zip(commits, drafted, strict=True) if d]
    accepted[-1] = 4  # vLLM counts the accepted drafts past max_tokens on the last step
    t0 = index * 60_000.0
    chunks = [Chunk(t_ns=int((t0 + 400.0) * MS), n_tokens=1)]
    pending, t = 0, t0 + 400.0
    for i, c in enumerate(commits):
        t += step_ms
        pending += c
        if (i + 1) % coalesce == 0 or i == len(commits) - 1:
            chunks.append(Chunk(t_ns=int(t * MS), n_tokens=pending))
            pending = 0
    fields = ServerSpecFields(
        verify_ct=61,
        accept_length=sum(a + 1 for a in accepted) / 61,
        accepted_drafts=sum(accepted),
        proposed_drafts=61 * 4,
        per_step_accepted=accepted,
        per_step_drafted=[4] * 61,
        source="vllm.metrics",
    )
    return RequestTrace(
        index=index,
        request_id=f"cmpl-{index}",
        spec=RequestSpec(prompt="class Config:", prompt_tokens=103, max_tokens=256),
        t_send_ns=int(t0 * MS),
        chunks=chunks,
        token_count_source="usage",
        completion_tokens=256,
        finish_reason="length",
        server_spec=fields,
        t_end_ns=chunks[-1].t_ns,
    )


def test_drafted_steps_list_is_recognised_and_the_last_step_capped():
    commits, drafted = vllm_steps()
    accepted = [c - 1 for c, d in zip(commits, drafted, strict=True) if d]
    accepted[-1] = 4
    check = check_server_steps(accepted, 255, commits, cut_by_max_tokens=True)
    assert check.covers == DRAFTED_STEPS
    assert check.capped_last == (5, 2)
    assert check.missing_steps == 40 and check.all_steps == 101
    assert check.client_agrees and "client steps agree" in check.verdict
    assert check.mean_commit_len == pytest.approx(255 / 101)
    assert check.mean_commit_len_per_drafted_step == pytest.approx(215 / 61)
    # without the client, an over-count past the stream is capped on the last step alone
    over = check_server_steps([0, 2, 4], 6)
    assert over.covers == EVERY_STEP and over.capped_last == (5, 2)
    # more than the last step could explain: the server is the side that is wrong
    bad = check_server_steps([4, 4, 4], 6)
    assert bad.covers == INCONSISTENT and "server's per-step list is wrong" in bad.verdict


def test_a_final_one_token_step_leaves_the_listed_last_step_uncut():
    """The request ends on an undrafted one-token step: vLLM's last listed step came earlier
    and was committed whole, so nothing is cut (cutting it to the stream's last step, 1 token,
    would invent one-token steps and lower the drafted-steps figure)."""
    client = [1, 3, 1, 4, 2, 1, 1]  # steps after the prefill token; the last two undrafted
    accepted = [2, 3, 1]  # drafted steps 3, 4, 2 committed whole
    check = check_server_steps(accepted, sum(client), client, cut_by_max_tokens=True)
    assert check.capped_last is None
    assert check.missing_steps == 4 and check.all_steps == len(client)
    assert check.client_agrees
    assert check.mean_commit_len_per_drafted_step == pytest.approx(3.0)
    # the same stream ending on a drafted step cut by max_tokens: its over-count is removed
    cut = check_server_steps([2, 3, 4], 11, [1, 3, 1, 4, 1, 1], cut_by_max_tokens=True)
    assert cut.capped_last == (5, 1) and cut.all_steps == 6
    # a read merged steps (no alignment): a last step of several tokens drafted, so it is cut
    merged = check_server_steps([2, 3, 4], 12, [4, 4, 2, 2], cut_by_max_tokens=True)
    assert merged.capped_last == (5, 2)


def test_probe_prints_the_all_steps_truth_beside_the_labelled_drafted_figure():
    traces = [vllm_trace(i) for i in range(3)]
    s = summarize(traces)
    assert s["mean_commit_len"] == pytest.approx(255 / 101, rel=1e-9)  # 2.525, not 3.574
    assert s["mean_commit_len_source"] == "client"
    assert s["mean_commit_len_per_drafted_step"] == pytest.approx(215 / 61, rel=1e-9)
    assert s["drafted_step_share"] == pytest.approx(61 / 101)
    assert s["mean_step_s"] == pytest.approx(STEP_MS / 1e3, rel=1e-6)  # 135.5 ms, not 191.8
    assert s["mean_step_s_source"] == "client"
    assert s["decode_tps"] == pytest.approx(255 / (101 * STEP_MS / 1e3), rel=1e-6)
    assert s["steps"]["methods"] == {"chunk": 3}
    assert "61 steps that drafted something" in s["steps"]["cross_checks"][0]["result"]
    lo, hi = s["mean_commit_len_ci"]
    assert lo <= s["mean_commit_len"] <= hi


def test_coalesced_chunks_fall_back_to_the_server_list_merged_with_the_stream():
    # chunks every 3 steps: the client cannot see steps; the server's drafted-steps list plus the
    # stream's token count still give the all-steps figure, and the client is named as wrong
    traces = [vllm_trace(i, coalesce=3) for i in range(2)]
    recs = [reconstruct_steps(t) for t in traces]
    assert not any(r.reliable for r in recs)
    assert "chunks merge steps" in recs[0].reason
    h = headline(traces, recs)
    assert h.mean_commit_len_source == "server"
    # merged chunks hide where the last step began: its over-count is capped at the last
    # chunk's tokens, a bound, so the figure is within a step of the truth (101 vs 100 steps)
    assert h.mean_commit_len == pytest.approx(255 / 101, rel=0.015)
    assert h.mean_step_s_source == "derived"
    assert h.mean_step_s == pytest.approx(STEP_MS / 1e3, rel=0.02)
    assert h.drafted_step_share == pytest.approx(61 / 101, rel=0.015)


def test_prometheus_all_steps_counters_come_before_server_fields():
    traces = [vllm_trace(i, coalesce=3) for i in range(2)]
    recs = [reconstruct_steps(t) for t in traces]
    prom = SpecRecord(
        format="prometheus",
        scope="run_delta",
        commit_len=1 + 2 * 157 / 122,
        n_steps=122,
        fields={
            "delta": {
                "drafts": 122.0,
                "accepted_tokens": 314.0,
                "generation_tokens": 512.0,
                "finished_requests": 2.0,
                "itl_count": 202.0,
                "itl_sum": 27.371,
            }
        },
    )
    h = headline(traces, recs, telemetry=[prom])
    assert h.mean_commit_len_source == "prometheus"
    assert h.mean_commit_len == pytest.approx(510 / 202)
    # the counters' drafted-steps figure (1 + accepted / drafts) is never the headline
    assert h.mean_commit_len != pytest.approx(prom.commit_len)


def _late_first_read(trace: RequestTrace, steps: int) -> RequestTrace:
    """The same stream read late at the start: its first read holds the prefill token and the
    next `steps` steps' events (one timestamp: the read's)."""
    first, rest = trace.chunks[: steps + 1], trace.chunks[steps + 1 :]
    t = first[-1].t_ns
    return trace.model_copy(
        update={"chunks": [Chunk(t_ns=t, n_tokens=c.n_tokens) for c in first] + rest}
    )


def test_a_late_first_read_is_measured_and_said():
    on_time = [vllm_trace(i) for i in range(2)]
    h = headline(on_time, [reconstruct_steps(t) for t in on_time])
    assert h.first_read_share == 0.0 and not any("first read" in n for n in h.notes)
    late = [_late_first_read(t, 6) for t in on_time]
    h = headline(late, [reconstruct_steps(t) for t in late])
    unseen = sum(vllm_steps()[0][:6])
    assert h.first_read_share == pytest.approx(unseen / 255)
    assert h.json_fields()["first_read_share"] == h.first_read_share
    note = next(n for n in h.notes if "first read" in n)
    assert f"held {2 * unseen} tokens beside the first" in note and "2 of 2 request(s)" in note


def test_diagnose_agrees_with_probe_and_names_draft_coverage():
    traces = [vllm_trace(i) for i in range(3)]
    run = Run(info=RunInfo(flavor="vllm", status="complete"), requests=traces)
    an = analyze(run)
    s = summarize(traces)
    assert an.decode_tps == pytest.approx(s["decode_tps"], rel=1e-9)
    assert an.mean_commit_len == pytest.approx(255 / 101)
    assert an.mean_commit_len_per_drafted_step == pytest.approx(215 / 61)
    assert an.decode_tps_ci == pytest.approx(s["decode_tps_ci"])
    f = next(f for f in an.findings if f.id == "draft_coverage")
    ev = {e.label: e.value for e in f.evidence}
    assert ev["steps that drafted nothing"] == 3 * 40
    assert ev["share that drafted nothing"] == pytest.approx(40 / 101, rel=1e-4)
    cost = ev["throughput cost of this effect (x faster without it)"]
    assert cost == pytest.approx((215 / 61) / (255 / 101), rel=1e-4)
    assert not any(f.id == "chunk_coalescing" for f in an.findings)


def test_no_draft_coverage_finding_when_every_step_drafts():
    # the same run with a server that lists every step: nothing drafted-nothing to report
    traces = []
    for i in range(2):
        t = vllm_trace(i)
        commits, _ = vllm_steps()
        t.server_spec = ServerSpecFields(
            per_step_accepted=[c - 1 for c in commits],
            per_step_drafted=[4] * len(commits),
            source="sglang.meta_info",
        )
        traces.append(t)
    an = analyze(Run(info=RunInfo(status="complete"), requests=traces))
    assert an.drafted_step_share == pytest.approx(1.0)
    assert "draft_coverage" not in {f.id for f in an.findings}
    assert an.mean_commit_len == pytest.approx(255 / 101)


def test_intervals_cover_a_known_mean_and_are_seeded():
    rng = np.random.default_rng(4)
    k = rng.integers(1, 6, size=2000).astype(float)
    s = rng.normal(0.1, 0.01, size=2000)
    rows, unit = unit_rows(k, s, np.repeat(np.arange(20), 100))
    assert unit == "request"
    ci = totals_intervals(rows, unit, seed=1)
    assert ci["mean_commit_len"].low < 3.0 < ci["mean_commit_len"].high
    assert ci["mean_step_s"].low < 0.1 < ci["mean_step_s"].high
    assert totals_intervals(rows, unit, seed=1) == ci
    assert "20 requests" in ci["decode_tps"].method
    assert totals_intervals(rows[:1], unit) is None  # one unit is a point, not an interval
    m = median_interval([0.1, 0.2, 0.3, 0.4, 0.5], seed=2)
    assert m.low <= 0.3 <= m.high
    assert median_interval([0.1]) is None


def test_prefill_read_holding_a_step_does_not_blame_either_side():
    # the first read carried the prefill token and the first step: the client's steps start
    # after it, so it sees 100 steps and 255 - commits[0] tokens of the stream's 255
    commits, drafted = vllm_steps()
    accepted = [c - 1 for c, d in zip(commits, drafted, strict=True) if d]
    accepted[-1] = 4
    hidden_first = commits[0]
    client = commits[1:]
    check = check_server_steps(accepted, 255, client, cut_by_max_tokens=True)
    assert check.covers == DRAFTED_STEPS and check.all_steps == 101
    assert check.client_agrees, check.verdict
    assert f"the first read held {hidden_first} more tokens" in check.verdict
    # a client that also merged two steps in the middle has fewer steps than the hidden tokens
    # allow for: it is named as the side that is wrong
    i = next(j for j in range(1, len(client)) if client[j - 1] == client[j] == 5)
    merged = [*client[: i - 1], 10, *client[i + 1 :]]
    bad = check_server_steps(accepted, 255, merged, cut_by_max_tokens=True)
    assert not bad.client_agrees and "chunks merge steps" in bad.verdict


def _short_request(index: int, merged_pairs: int) -> RequestTrace:
    """64 tokens: the prefill token, then 40 verify steps committing 63 (23 accepted drafts,
    the rest one-token steps), 20 ms apart; `merged_pairs` events each carry
    two steps (the later one's time), as vLLM's stream does now and then when it falls behind.
    The server's counts (drafted steps only, vLLM's) say 63 - 23 = 40 steps."""
    commits = [2, 1, 3, 1, 2, 1, 1, 2] * 5  # 20 drafted steps (23 accepted drafts), 20 not
    commits[2::8] = [3, 3, 3, 2, 2]
    assert sum(commits) == 63 and len(commits) == 40
    t0 = index * 10_000.0
    chunks = [Chunk(t_ns=int((t0 + 100.0) * MS), n_tokens=1)]
    t, carry = t0 + 100.0, 0
    for i, c in enumerate(commits):
        t += 20.0
        if i % 9 == 4 and i // 9 < merged_pairs:
            carry = c
            continue
        chunks.append(Chunk(t_ns=int(t * MS), n_tokens=c + carry))
        carry = 0
    fields = ServerSpecFields(
        verify_ct=sum(c > 1 for c in commits), accepted_drafts=63 - 40, source="vllm.metrics"
    )
    return RequestTrace(
        index=index,
        request_id=f"cmpl-{index}",
        spec=RequestSpec(prompt="The lighthouse", prompt_tokens=60, max_tokens=64),
        t_send_ns=int(t0 * MS),
        chunks=chunks,
        token_count_source="usage",
        completion_tokens=64,
        finish_reason="length",
        server_spec=fields,
        t_end_ns=chunks[-1].t_ns,
    )


def _merged_now_and_then(trace: RequestTrace, every: int = 7) -> RequestTrace:
    """The trace with every `every`-th event folded into the next one, as vLLM's API server
    does now and then when its stream falls behind (the later event's time, both steps'
    tokens): no regular coalescing, every event still looks like one step."""
    chunks = list(trace.chunks)
    out = [chunks[0]]
    carry = 0
    for i, c in enumerate(chunks[1:-1], start=1):
        if i % every == 0:
            carry += c.n_tokens
            continue
        out.append(c.model_copy(update={"n_tokens": c.n_tokens + carry}))
        carry = 0
    out.append(chunks[-1].model_copy(update={"n_tokens": chunks[-1].n_tokens + carry}))
    return trace.model_copy(update={"chunks": out})


def _counts_only(trace: RequestTrace) -> RequestTrace:
    """vLLM's per-request counts without the per-step list (its drafted steps and accepted
    drafts only): nothing to align the client's steps with, step by step."""
    fields = trace.server_spec.model_copy(
        update={"per_step_accepted": None, "per_step_drafted": None}
    )
    return trace.model_copy(update={"server_spec": fields})


def test_events_that_merge_steps_now_and_then_take_the_servers_step_count():
    """Two merged events in a 64-token request: 38 client steps for the server's 40, a commit
    length 5% high, which the per-request mean check lets pass (it must allow for the prefill
    token's convention). The step count decides: the server's figure, and a note says why."""
    traces = [_short_request(i, merged_pairs=2) for i in range(3)]
    recs = [reconstruct_steps(t) for t in traces]
    assert all(r.reliable and len(r.steps) == 38 for r in recs)  # nothing else flags it
    h = headline(traces, recs)
    assert h.mean_commit_len == pytest.approx(63 / 40, rel=1e-9)
    assert h.mean_commit_len_source == "server"
    assert any("merged verify steps" in n for n in h.notes), h.notes
    # the same events unmerged: the client's own steps, no note
    whole = [_short_request(i, merged_pairs=0) for i in range(3)]
    h1 = headline(whole, [reconstruct_steps(t) for t in whole])
    assert h1.mean_commit_len_source == "client"
    assert h1.mean_commit_len == pytest.approx(63 / 40, rel=1e-9)
    assert not any("merged verify steps" in n for n in h1.notes)


def _vllm_run_delta(requests: int, steps: int, step_s: float) -> SpecRecord:
    """vLLM's Prometheus run delta as probe --metrics-url keeps it (plain decoding counters)."""
    delta = {
        "itl_count": float(steps),
        "itl_sum": steps * step_s,
        "generation_tokens": 256.0 * requests,
        "finished_requests": float(requests),
    }
    return SpecRecord(format="prometheus", scope="run_delta", fields={"delta": delta})


def test_a_stream_slower_than_the_engine_is_measured_and_said():
    """vLLM times its steps at the engine; the client at the socket. When the API server (or
    the client) falls behind, each step arrives a little later than the last and no event
    merges: the client's step time is the delivery's, and the headline says by how much."""
    traces = [vllm_trace(i) for i in range(2)]
    recs = [reconstruct_steps(t) for t in traces]
    engine_s = STEP_MS / 1e3
    on_pace = headline(traces, recs, telemetry=[_vllm_run_delta(2, 202, engine_s)])
    assert on_pace.server_step_s == pytest.approx(engine_s)
    assert on_pace.delivery_lag_share == pytest.approx(0.0, abs=1e-6)
    assert not any("delivered a step" in n for n in on_pace.notes)
    late = headline(traces, recs, telemetry=[_vllm_run_delta(2, 202, engine_s / 1.08)])
    assert late.delivery_lag_share == pytest.approx(0.08, rel=1e-6)
    assert late.mean_step_s == pytest.approx(engine_s, rel=1e-6)  # the delivered step, kept
    note = next(n for n in late.notes if "delivered a step" in n)
    assert f"every {STEP_MS:.1f} ms" in note and "8% slower" in note
    assert late.json_fields()["delivery_lag_share"] == late.delivery_lag_share
    # counters that hold other requests than these time other steps: no comparison
    shared = headline(traces, recs, telemetry=[_vllm_run_delta(3, 303, engine_s / 1.08)])
    assert shared.server_step_s is None and shared.delivery_lag_share is None
    assert not any("delivered a step" in n for n in shared.notes)
