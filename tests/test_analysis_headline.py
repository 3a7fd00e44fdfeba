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
