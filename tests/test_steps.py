"""Step reconstruction and the probe summary on synthetic traces with known answers."""

from __future__ import annotations

import pytest

from specscope.analysis.steps.reconstruct import reconstruct_steps
from specscope.analysis.steps.server import all_steps_mean_commit_len, check_server_steps
from specscope.analysis.summary import summarize
from specscope.trace.model import Chunk, ErrorInfo, RequestSpec, RequestTrace, ServerSpecFields

MS = 1_000_000


def trace(
    chunks: list[tuple[float, int]],
    *,
    source="usage",
    prompt=100,
    spec=None,
    index=0,
    error=None,
    completion=None,
) -> RequestTrace:
    cs = [Chunk(t_ns=int(t * MS), n_tokens=n) for t, n in chunks]
    return RequestTrace(
        index=index,
        spec=RequestSpec(prompt="x", prompt_tokens=prompt),
        t_send_ns=0,
        chunks=cs,
        token_count_source=source,
        completion_tokens=completion if completion is not None else sum(n for _, n in chunks),
        server_spec=spec,
        error=error,
        t_end_ns=cs[-1].t_ns if cs else 0,
    )


def per_step(commits: list[int], step_ms=40.0, ttft_ms=100.0) -> list[tuple[float, int]]:
    return [(ttft_ms, 1)] + [(ttft_ms + step_ms * (i + 1), c) for i, c in enumerate(commits)]


def per_token(
    commits: list[int], step_ms=115.0, intra_ms=(5.0, 0.0, 0.0, 0.1, 2.0), ttft_ms=127.0
) -> list[tuple[float, int]]:
    """llama.cpp shape (peers-and-models.md §E): one event per token, a burst per step."""
    out = [(ttft_ms, 1)]
    t = ttft_ms
    for c in commits:
        t += step_ms
        out.append((t, 1))
        for j in range(c - 1):
            t += intra_ms[j % len(intra_ms)]
            out.append((t, 1))
    return out


def test_per_step_chunks_give_exact_steps_and_contexts():
    commits = [3, 2, 4, 1, 3]
    r = reconstruct_steps(trace(per_step(commits)), max_commit_len=4)
    assert r.method == "chunk" and r.reliable, r.reason
    assert [s.commit_len for s in r.steps] == commits
    assert all(s.step_s == pytest.approx(0.040) for s in r.steps)
    assert [s.output_pos for s in r.steps] == [1, 4, 6, 10, 11]
    assert [s.context_len for s in r.steps] == [101, 104, 106, 110, 111]
    assert r.mean_commit_len == pytest.approx(2.6)
    assert r.mean_step_s == pytest.approx(0.040)


def test_llamacpp_bursts_grouped_by_large_gap_threshold():
    commits = [5, 5, 5, 5, 3, 5, 1, 5]
    r = reconstruct_steps(trace(per_token(commits), source="events"))
    assert r.method == "burst" and r.reliable, r.reason
    assert [s.commit_len for s in r.steps] == commits
    assert r.mean_step_s == pytest.approx(0.115, rel=0.1)
    # The threshold is relative to the large gaps (~115 ms), not to the median gap (~0 ms).
    assert 0.010 < r.burst_threshold_s < 0.06


def _llamacpp_fields(commits: list[int]) -> ServerSpecFields:
    """What llama.cpp's timings give for these steps: verify steps after the first token."""
    predicted = 1 + sum(commits)
    accepted = sum(c - 1 for c in commits)
    return ServerSpecFields(
        verify_ct=predicted - 1 - accepted, accepted_drafts=accepted, source="llamacpp.timings"
    )


def test_a_step_split_by_one_slow_token_is_regrouped_by_the_servers_count():
    """A preempted server (or a loaded client) leaves one 12 ms gap inside a step whose other
    tokens are 0.2 ms apart, steps 115 ms apart: the largest break (0.5 -> 12 ms, gaps floored
    at 0.5 ms) splits that step in two. llama.cpp counts its steps exactly, and the break that
    gives its count (12 -> 115 ms) is still a break, so the steps are the server's, timed by
    the client."""
    commits = [5, 5, 5, 5, 3, 5, 1, 5]
    events = per_token(commits, intra_ms=(0.2,))
    i = 1 + 5 + 5 + 2  # the third token of the third step
    events = events[:i] + [(t + 12.0, n) for t, n in events[i:]]
    split = reconstruct_steps(trace(events, source="events"))
    assert len(split.steps) == len(commits) + 1  # the largest break alone splits it
    r = reconstruct_steps(trace(events, source="events", spec=_llamacpp_fields(commits)))
    assert r.method == "burst" and r.reliable, r.reason
    assert [s.commit_len for s in r.steps] == commits
    assert any("the server counted 8 steps" in n for n in r.notes), r.notes


def test_a_server_count_that_no_break_gives_leaves_the_bursts_and_the_disagreement():
    """A count the gaps do not support (no break yields it) moves nothing: the bursts stay,
    the cross-check with the server says they disagree, and the bursts are not trusted as the
    steps (what a late read merging two steps' bursts looks like)."""
    commits = [5, 5, 5, 5, 3, 5, 1, 5]
    fields = _llamacpp_fields(commits).model_copy(update={"verify_ct": 5})
    r = reconstruct_steps(trace(per_token(commits), source="events", spec=fields))
    assert [s.commit_len for s in r.steps] == commits
    assert not any("server counted" in n for n in r.notes)
    assert "disagree" in (r.cross_check or ""), r.cross_check
    assert not r.reliable and f"{len(commits)} bursts where the server counted" in r.reason


def test_long_commits_still_cluster_when_step_gaps_are_rare():
    commits = [12] * 6  # 11 intra-burst gaps per step gap: step gaps are < 10% of all gaps
    r = reconstruct_steps(
        trace(per_token(commits, intra_ms=(0.5,)), source="events"), max_commit_len=16
    )
    assert [s.commit_len for s in r.steps] == commits and r.reliable


def test_non_speculative_per_token_stream_is_one_token_per_step():
    r = reconstruct_steps(trace([(10.0 + 20.0 * i, 1) for i in range(30)]))
    # no server field says a step committed more than one token: each chunk is a step
    assert r.method == "chunk" and r.reliable
    assert {s.commit_len for s in r.steps} == {1}
    assert r.mean_step_s == pytest.approx(0.020)


def test_chunk_larger_than_max_commit_is_coalescing():
    r = reconstruct_steps(trace(per_step([3, 7, 2, 8])), max_commit_len=5)
    assert not r.reliable and "max commit length" in r.reason


def test_constant_chunk_size_flags_stream_interval():
    r = reconstruct_steps(trace(per_step([4] * 10)))
    assert not r.reliable and "stream interval" in r.reason
    # ... unless every draft being accepted explains it.
    assert reconstruct_steps(trace(per_step([4] * 10)), max_commit_len=4).reliable


def test_gaps_at_multiples_of_a_base_period_flag_coalescing():
    base = 30.0
    mult = [1, 2, 1, 3, 1, 2, 2, 1, 3, 1, 2, 1]
    chunks, t = [(50.0, 1)], 50.0
    for k in mult:
        t += base * k
        chunks.append((t, 2 * k + (k % 2)))  # merged chunks carry more tokens
    r = reconstruct_steps(trace(chunks))
    assert not r.reliable and "multiples" in r.reason


def test_events_in_one_read_are_steps_each_with_the_read_gap_split():
    """A late read delivers two step events at once: still two steps (the server writes one
    event per step), each timed by half the read's gap, so the request's sums stay exact."""
    chunks = per_step([2, 3, 2, 3, 2, 3])
    chunks.insert(3, (chunks[3][0], 1))  # arrived in the same read as its neighbour
    r = reconstruct_steps(trace(chunks))
    assert r.method == "chunk" and r.reliable, r.reason
    assert [s.commit_len for s in r.steps] == [2, 3, 1, 2, 3, 2, 3]
    assert [round(s.step_s * 1e3, 6) for s in r.steps] == [40, 40, 20, 20, 40, 40, 40]
    assert sum(s.step_s for s in r.steps) == pytest.approx(0.240)
    assert any("same read" in n for n in r.notes)
    assert [s.output_pos for s in r.steps] == [1, 3, 6, 7, 9, 12, 14]


def test_one_token_events_sharing_reads_often_are_in_doubt():
    """Every event one token and many reads holding two: those may be one step's tokens
    streamed one by one, so the step count is in doubt (unreliable, and said why)."""
    chunks = [(10.0 + 40.0 * i, 1) for i in range(30)]
    for i in range(3, 30, 4):
        chunks[i] = (chunks[i - 1][0], 1)
    r = reconstruct_steps(trace(chunks))
    assert not r.reliable and "same read" in r.reason


def test_plain_decoding_read_late_often_stays_one_step_per_event():
    """A loaded client reads plain decoding late: every fourth read holds two one-token events
    after twice the step time. Each read took its events' time, so these are separate steps
    (timed by the split), not one step's tokens: the count stands and the steps are timed."""
    chunks = [(10.0 + 40.0 * i, 1) for i in range(30)]
    for i in range(3, 30, 4):
        chunks[i - 1] = (chunks[i][0], 1)  # event i-1 was read together with event i
    r = reconstruct_steps(trace(chunks))
    assert r.method == "chunk" and r.reliable, r.reason
    assert len(r.steps) == 29 and r.mean_step_s == pytest.approx(0.040)
    assert any("same read" in n for n in r.notes)


def _client_reads(
    arrivals_ms: list[float], rng, p_late: float, late_ms: float
) -> list[tuple[float, int]]:
    """What a client stamps: after each read it waits for the next event and wakes 0.2 ms
    after it, or (with probability p_late) an exponential delay later, and reads everything
    that has arrived by then (one stamp for the read)."""
    out, i = [], 0
    while i < len(arrivals_ms):
        wake = arrivals_ms[i] + (rng.expovariate(1 / late_ms) if rng.random() < p_late else 0.2)
        j = i
        while j < len(arrivals_ms) and arrivals_ms[j] <= wake:
            j += 1
        out.extend((wake, 1) for _ in range(i, j))
        i = j
    return out


def test_late_reads_tell_plain_decoding_from_one_steps_tokens_streamed_apart():
    """A loaded client (5-40% of reads late by 0.3-2 steps on average) in front of two servers
    that send one token per event: plain decoding (a step a token) keeps its steps, every one
    timed (but those in the prefill token's read); a server streaming each step's 1-5 tokens one
    by one, 50 us apart, has its step count put in doubt (100 seeded streams each)."""
    import random

    rng = random.Random(11)
    plain_kept = split_doubted = 0
    for _ in range(100):
        t, plain = 100.0, []
        for _ in range(64):
            t += 50.0 * rng.uniform(0.9, 1.1)
            plain.append(t)
        t, streamed = 100.0, []
        for _ in range(20):
            t += 50.0 * rng.uniform(0.9, 1.1)
            streamed.extend(t + 0.05 * k for k in range(rng.randint(1, 5)))
        p_late, late_ms = rng.uniform(0.05, 0.4), 50.0 * rng.uniform(0.3, 2.0)
        reads = _client_reads(plain, rng, p_late, late_ms)
        first_read = sum(1 for t_ms, _ in reads if t_ms == reads[0][0])  # prefill's read: untimed
        r = reconstruct_steps(trace(reads))
        plain_kept += r.reliable and len(r.steps) == 64 - first_read
        r = reconstruct_steps(trace(_client_reads(streamed, rng, p_late, late_ms)))
        split_doubted += not r.reliable and "same read" in r.reason
    assert plain_kept == 100
    assert split_doubted == 100


def test_noisy_but_honest_step_times_stay_reliable():
    import random

    rng = random.Random(3)
    chunks, t = [(80.0, 1)], 80.0
    for _ in range(40):
        t += 40.0 * rng.uniform(0.85, 1.25)
        chunks.append((t, rng.randint(1, 5)))
    r = reconstruct_steps(trace(chunks), max_commit_len=5)
    assert r.reliable, r.reason


def test_server_per_step_data_wins_and_cross_checks():
    commits = [3, 2, 4, 1]
    spec = ServerSpecFields(per_step_accepted=[c - 1 for c in commits], source="vllm.metrics")
    r = reconstruct_steps(trace(per_step(commits), spec=spec))
    assert r.method == "server" and r.reliable
    assert [s.commit_len for s in r.steps] == commits
    assert r.steps[0].step_s == pytest.approx(0.040)
    assert r.cross_check.startswith("client steps agree")
    # Client saw coalesced chunks: the server still wins and the disagreement is reported.
    merged = [(100.0, 1), (180.0, 5), (260.0, 5)]
    r2 = reconstruct_steps(trace(merged, spec=spec))
    assert r2.method == "server" and [s.commit_len for s in r2.steps] == commits
    assert "disagrees" in r2.cross_check
    assert sum(s.step_s for s in r2.steps) == pytest.approx(0.160)


def test_server_summary_disagreement_marks_client_unreliable():
    # the server counts 8 tokens/step where the client sees 2: the client's chunks merge steps
    merged = trace([(100.0, 1), (140.0, 8), (180.0, 8)], spec=ServerSpecFields(verify_ct=16))
    r = reconstruct_steps(merged)
    assert not r.reliable and "disagree" in r.cross_check and "merge steps" in r.cross_check
    # five chunks for two server steps: a chunk is at least one step, so the server is the side
    # that is wrong and the client is not blamed
    t = trace(per_step([2, 2, 2, 2, 2]), spec=ServerSpecFields(verify_ct=2))
    r = reconstruct_steps(t)
    assert (
        r.reliable and "disagree" in r.cross_check and "server's figure is wrong" in r.cross_check
    )


def test_too_few_chunks_and_failed_requests():
    assert reconstruct_steps(trace([(10.0, 5)])).method == "none"
    r = reconstruct_steps(
        trace(per_step([2, 2]), error=ErrorInfo(kind="stream_truncated", message="cut"))
    )
    assert not r.reliable and "request failed" in r.reason


@pytest.mark.parametrize(
    "fields, expected",
    [
        (ServerSpecFields(accept_length=2.5), 2.5),
        (ServerSpecFields(verify_ct=4), 10 / 4),
        (ServerSpecFields(accept_histogram=[1, 1, 2]), (1 + 2 + 6) / 4),
        (ServerSpecFields(accepted_drafts=5, proposed_drafts=9), None),
    ],
)
def test_server_mean_commit_len(fields, expected):
    t = trace([(1.0, 1), (2.0, 9)], spec=fields)
    assert all_steps_mean_commit_len(t.server_spec, t.completion_tokens) == expected


def test_server_per_step_list_mean_is_per_listed_step():
    # a per-step list's own mean is over the steps it lists (here: 9 streamed tokens, 4 listed,
    # so it lists drafted steps only and five one-token steps are missing from it)
    check = check_server_steps([0, 2], 9)
    assert check.mean_commit_len_per_drafted_step == 2.0
    assert check.missing_steps == 5 and check.mean_commit_len == pytest.approx(9 / 7)


# -- summary ------------------------------------------------------------------------------


def test_summary_token_weighted_decode_tps_and_sources():
    a = trace(per_step([1, 3] * 5, step_ms=40.0), index=0)  # 20 tokens in 0.4 s
    b = trace(per_step([4] * 5, step_ms=100.0), index=1)  # 20 tokens in 0.5 s
    bad = trace([(5.0, 1)], index=2, error=ErrorInfo(kind="http_status", message="500"))
    s = summarize([a, b, bad], max_commit_len=4)
    assert s["requests"] == 3 and s["errors"] == 1 and s["error_kinds"] == {"http_status": 1}
    assert s["decode_tps"] == pytest.approx(40 / 0.9, rel=1e-6)
    assert s["ttft_s_p50"] == pytest.approx(0.1)
    assert (
        s["mean_commit_len"] == pytest.approx(40 / 15) and s["mean_commit_len_source"] == "client"
    )
    assert s["mean_step_s"] == pytest.approx(0.9 / 15) and s["mean_step_s_source"] == "client"


def test_summary_prefers_server_commit_and_derives_step_time():
    # Coalesced chunks (unreliable client steps) but the server says verify_ct.
    t = trace(
        [(100.0, 1), (200.0, 9), (300.0, 10)], spec=ServerSpecFields(verify_ct=5), completion=20
    )
    s = summarize([t], max_commit_len=4)
    assert s["mean_commit_len"] == pytest.approx(4.0) and s["mean_commit_len_source"] == "server"
    assert s["decode_tps"] == pytest.approx(19 / 0.2)
    assert s["mean_step_s_source"] == "derived"
    assert s["mean_step_s"] == pytest.approx(4.0 / (19 / 0.2))
    assert s["steps"]["unreliable_reasons"]


def test_summary_of_nothing_is_all_null():
    s = summarize([])
    assert s["requests"] == 0 and s["decode_tps"] is None
    assert s["mean_commit_len"] is None and s["mean_step_s"] is None


def test_bursts_survive_tenfold_step_time_variation_and_stalls():
    # A contended machine: step gaps from 0.1 s to 3 s, one 20 s stall; tokens of a step 0-5 ms.
    import random

    rng = random.Random(7)
    commits = [rng.randint(1, 5) for _ in range(30)]
    chunks, t = [(500.0, 1)], 500.0
    for i, c in enumerate(commits):
        t += 20_000.0 if i == 11 else rng.uniform(100.0, 3000.0)
        chunks.append((t, 1))
        for _ in range(c - 1):
            t += rng.choice([0.0, 0.0, 0.1, 2.0, 5.0])
            chunks.append((t, 1))
    r = reconstruct_steps(trace(chunks, source="events"), max_commit_len=5)
    assert r.method == "burst" and r.reliable, r.reason
    assert [s.commit_len for s in r.steps] == commits


def test_one_late_read_among_many_steps_is_a_note_not_coalescing():
    """A loaded client reads two step events together once in 150 steps: the other steps are
    intact, so the request stays reliable (the merge is noted); a stream that merges often is
    still coalescing."""
    commits = [3, 5, 2, 8, 4, 6] * 25
    merged = per_step(commits)
    merged[40:42] = [(merged[41][0], merged[40][1] + merged[41][1])]  # 8 + 4 = 12 > max 8
    r = reconstruct_steps(trace(merged), max_commit_len=8)
    assert r.reliable, r.reason
    assert any("max commit length" in n for n in r.notes)
    often = per_step(commits)
    for i in range(100, 3, -6):  # every sixth pair merged
        often[i - 1 : i + 1] = [(often[i][0], often[i - 1][1] + often[i][1])]
    assert not reconstruct_steps(trace(often), max_commit_len=8).reliable


def test_plain_decoding_read_late_is_not_grouped_into_bursts():
    """One token per step (no speculation), but a loaded client read two steps in quick
    succession: still one step per chunk, never a two-token "burst"."""
    times = [10.0 + 70.0 * i for i in range(30)]
    times[12] = times[11] + 0.3  # read 0.3 ms after the step before it
    r = reconstruct_steps(trace([(t, 1) for t in times]))
    assert r.method == "chunk" and {s.commit_len for s in r.steps} == {1}
    assert len(r.steps) == 29


def test_llamacpp_plain_stream_read_late_is_one_step_per_event():
    """Plain llama.cpp (one event per token) read late by a loaded client: reads holding 2-3
    events. Timings without draft_n say nothing was drafted: every event is a step."""
    times = [10.0 + 40.0 * i for i in range(40)]
    for i in (8, 9, 20, 21, 22, 30):
        times[i - 1] = times[i]  # read together with the next event, after their steps' time
    chunks = [(t, 1) for t in times]
    fields = ServerSpecFields(
        verify_ct=39,
        accepted_drafts=0,
        proposed_drafts=0,
        accept_length=1.0,
        source="llamacpp.timings",
    )
    r = reconstruct_steps(trace(chunks, source="events", spec=fields))
    assert {s.commit_len for s in r.steps} == {1}, r.reason
    assert r.reliable and r.mean_commit_len == 1.0


def test_bursts_that_took_a_step_per_token_are_late_reads_without_server_fields():
    """Plain decoding read late, nothing from the server: a read holding two events came two
    steps' time after the read before it (80 ms at 40 ms a step), so it is two steps read
    together, not one step's two tokens; those take one step's time (`per_token`)."""
    times = [10.0 + 40.0 * i for i in range(40)]
    for i in (8, 16, 22, 30):
        times[i - 1] = times[i]
    late = reconstruct_steps(trace([(t, 1) for t in times], source="events"))
    assert late.method == "chunk" and {s.commit_len for s in late.steps} == {1}, late.reason
    assert "late reads" in late.reason and late.mean_commit_len == 1.0
    spec = reconstruct_steps(
        trace(
            per_token([1, 2, 1, 1, 3, 1, 2, 1] * 4, step_ms=40.0, intra_ms=(0.2, 0.0, 0.1)),
            source="events",
        )
    )
    assert spec.method == "burst" and spec.mean_commit_len > 1.3, spec.reason


def test_speculation_off_makes_a_merged_chunk_that_many_steps():
    """Plain decoding, one chunk a step, two pairs of chunks merged into 2-token chunks by a
    server whose consumer fell behind (vLLM's output processor under load): with speculation
    off (declared, or read from ~1 token a step) every step commits one token, so the
    headline's commit length is 1.0, not 1.03."""
    chunks = per_step([1] * 60, step_ms=50.0)
    for i in (20, 45):
        chunks[i] = (chunks[i][0], 2)
        del chunks[i + 1]
    traces = [trace(chunks, index=0), trace(chunks, index=1)]
    assert reconstruct_steps(traces[0]).mean_commit_len > 1.0
    for server_info in ({"speculative_algorithm": None}, {}):
        s = summarize(traces, server_info=server_info)
        assert s["speculation"] == "off", s["speculation_reason"]
        assert s["mean_commit_len"] == 1.0 and s["mean_commit_len_source"] == "client"
