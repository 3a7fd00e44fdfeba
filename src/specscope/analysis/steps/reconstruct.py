"""Reconstruct verify steps from one request's stream (ARCHITECTURE §4). Pure: no I/O.

Three methods:
- `server`: per-step lists the server reported (vLLM `per_step_accepted`, SGLang per-step
  stats), used only when they pass the cross-check with the stream (analysis.server_steps) as
  covering every step. A list of drafted steps only (vLLM leaves out the steps that drafted
  nothing) or one the stream contradicts stays evidence beside the client's steps
  (`server_check`). Step times come from the client chunks when their count matches, else the
  decode window is spread evenly (`timed_by_client` False).
- `chunk`: servers that stream one chunk per verify step (SGLang, vLLM at stream interval 1):
  chunk i is a step with `commit_len = n_tokens` and `step_s` = gap to the previous chunk.
- `burst`: servers that stream one event per token (llama.cpp): a step's tokens arrive as a
  burst, so events are grouped by inter-arrival gap. The threshold sits at the natural break
  between the small and the large gaps (largest ratio of consecutive sorted gaps, validated
  against the max commit length), never at a fraction of the median of all gaps, which is ~0
  when most events are intra-burst (peers-and-models.md §E); step times that vary tenfold on
  a contended machine do not move it. Where the server counts the request's steps exactly
  (llama.cpp's timings) and the largest break disagrees, the break that gives that count is
  taken if it is still a break (a step's tokens written or read apart leave one intra-step gap
  larger than the rest, but short of a step's).

The first chunk (or burst) carries the token sampled from prefill; it is not a verify step.
Coalescing (several steps merged into one chunk) makes client steps unreliable; the result says
so and why, and the summary falls back to server telemetry.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from dataclasses import dataclass, field

from specscope.analysis.steps.server import (
    DISAGREEMENT,
    DRAFTED_STEPS,
    EVERY_STEP,
    ServerStepCheck,
    check_server_steps,
    server_commit,
    stream_decode_tokens,
)
from specscope.trace.model import CANCELLED, RequestTrace, Step

#: Gaps below this are timer/transport noise (tokens of one step written back to back).
GAP_FLOOR_S = 0.0005
#: A break between intra-step and step gaps must be at least this ratio.
MIN_BREAK_RATIO = 3.0
#: Largest-ratio breaks tried (each is validated against the max commit length).
MAX_BREAK_CANDIDATES = 12
#: Where the server counts the request's steps exactly and the natural break disagrees, the break
#: that gives that count is taken when it is still a break: at least this ratio between the gaps
#: on its two sides (a step's tokens written apart by a preempted server, or read apart by a
#: loaded client, leave one intra-step gap larger than the rest but still short of a step's).
COUNTED_BREAK_RATIO = 1.5
#: Largest commit length assumed when none is given (bounds how few steps there can be).
DEFAULT_MAX_COMMIT = 16
#: Reads holding several one-token events whose gap per event is at least this share of a
#: single-event read's gap are late reads of separate steps (one step's tokens take one gap).
LATE_READ_SHARE = 0.75


@dataclass
class StepReconstruction:
    """Steps of one request and how far to trust them. `method`: server | chunk | burst | none."""

    steps: list[Step]
    reliable: bool
    method: str
    reason: str
    cross_check: str | None = None
    burst_threshold_s: float | None = None
    notes: list[str] = field(default_factory=list)
    #: Step times are measured client gaps (False: server steps spread over the decode window).
    timed_by_client: bool = True
    #: The server's per-step list checked against the stream, when the server sent one.
    server_check: ServerStepCheck | None = None

    @property
    def total_commit(self) -> int:
        return sum(s.commit_len for s in self.steps)

    @property
    def mean_commit_len(self) -> float | None:
        return self.total_commit / len(self.steps) if self.steps else None

    @property
    def mean_step_s(self) -> float | None:
        timed = [s.step_s for s in self.steps if s.step_s > 0]
        return sum(timed) / len(timed) if timed and len(timed) == len(self.steps) else None


def _context(prompt: int | None, pos: int) -> int | None:
    return None if prompt is None else prompt + pos


def _is_per_token(trace: RequestTrace, events: list[tuple[int, int]]) -> bool:
    """Whether the stream sends one event per token (so a step's tokens must be grouped into
    bursts) rather than one chunk per step. Every chunk carrying one token is either per-token
    streaming of multi-token steps or plain decoding (one token per step); without a sign that
    steps committed several tokens, each chunk is a step: grouping plain decoding's tokens by
    gap would invent bursts wherever a loaded client read two steps at once. A stream whose
    tokens are counted by events (llama.cpp) is per-token by protocol; whether its bursts are
    steps is decided on the bursts themselves (`_client`)."""
    if trace.token_count_source == "events":
        return True
    body = events[:-1] if len(events) > 2 else events  # a final event may carry the remainder
    return all(n == 1 for _, n in body) and _multi_token_steps(trace)


def _multi_token_steps(trace: RequestTrace) -> bool:
    """The server's own fields say some verify step committed more than one token."""
    f = trace.server_spec
    if f is None:
        return False
    tokens = trace.completion_tokens or 0
    if f.decode_steps is not None:  # counts the steps after the first token exactly
        return tokens - 1 > f.decode_steps
    return bool(
        (f.accepted_drafts or 0) > 0
        or (f.accept_length or 0) > 1.0
        or any(f.per_step_accepted or ())
        or (f.accept_histogram and sum(f.accept_histogram[1:]) > 0)
        or (f.verify_ct and tokens > f.verify_ct)
    )


def _drafted_nothing(trace: RequestTrace) -> bool:
    """The server's own fields say this request drafted nothing (0 drafts proposed), so every
    step committed one token."""
    f = trace.server_spec
    return f is not None and f.proposed_drafts == 0 and not f.accepted_drafts


def _multiple_of_base(gaps: list[float]) -> float | None:
    """The base period when the gaps are whole multiples (>= 2x) of one period, else None.

    A server that skips stream updates (stream interval > 1, a lagging consumer) emits after 2, 3
    ... steps, so its gaps sit near integer multiples of the step time; honest per-step chunks
    cluster near 1x.
    """
    if len(gaps) < 6:
        return None
    base = statistics.quantiles(gaps, n=4)[0]
    if base <= 0:
        return None
    ratios = [g / base for g in gaps]
    long_ = [r for r in ratios if r >= 1.5]
    near = [r for r in long_ if abs(r - round(r)) <= 0.15]
    if len(near) >= max(2, 0.2 * len(gaps)) and len(near) >= 0.8 * len(long_):
        return base
    return None


def _late_reads(reads: list[list[tuple[int, int]]], gaps: list[float]) -> bool:
    """Whether the reads that held several events took as long per event as the single-event
    reads took each: a late client read of separate steps (k steps' time passed before it). One
    step's tokens streamed one by one arrive within one step's time instead, so in one read
    (gap per event ~1/k of a step) or in reads a fraction of a millisecond apart.

    The time of a late read is made up by the short gap after it, so the late reads are judged
    together, against the median single-event gap, and sub-step gaps between single reads may
    be no more frequent than the late reads that explain them. `gaps[i]`: from read i to
    read i + 1."""
    single = [g for g, r in zip(gaps, reads[1:], strict=True) if len(r) == 1]
    shared = [(g, len(r)) for g, r in zip(gaps, reads[1:], strict=True) if len(r) > 1]
    if len(single) < 5 or not shared:
        return False
    typical = statistics.median(single)
    per_event = sum(g for g, _ in shared) / sum(k for _, k in shared)
    sub_step = sum(1 for g in single if g < 0.1 * typical)
    return per_event >= LATE_READ_SHARE * typical and sub_step <= len(shared)


def _bursts_are_late_reads(steps: list[Step], threshold: float) -> bool:
    """Whether the multi-token bursts are late reads of one-token steps: `_late_reads` on the
    bursts, each burst's gap being its step time. One step's k tokens take one step's time (a
    gap per token ~1/k of a single token's); k steps read late took k steps' time."""
    if threshold <= 0 or not any(s.commit_len > 1 for s in steps):
        return False
    first: list[tuple[int, int]] = [(0, 1)]  # the prefill burst: only its place matters
    bursts = [first, *([(s.t_end_ns, 1)] * s.commit_len for s in steps)]
    return _late_reads(bursts, [s.step_s for s in steps])


def _chunk_steps(
    reads: list[list[tuple[int, int]]], prompt: int | None, request_index: int
) -> list[Step]:
    """One step per event after the first read (that read carries the token sampled from
    prefill; steps that arrived with it are not timed, so they count as its tokens).

    Events that arrived in one read are still one step each: a server that streams a chunk per
    step writes one event per step, and a late read only delivers them together. The read's gap
    is split evenly over its events, so per-request sums and means stay exact while those
    steps' individual times are an even split (noted by the caller)."""
    steps: list[Step] = []
    pos = sum(n for _, n in reads[0])
    for prev, cur in itertools.pairwise(reads):
        t = cur[0][0]
        share = (t - prev[0][0]) / 1e9 / len(cur)
        for _, n in cur:
            steps.append(
                Step(
                    t_end_ns=t,
                    commit_len=n,
                    step_s=share,
                    context_len=_context(prompt, pos),
                    output_pos=pos,
                    source="chunk",
                    request_index=request_index,
                )
            )
            pos += n
    return steps


def _group(
    events: list[tuple[int, int]], gaps: list[float], threshold: float
) -> list[list[tuple[int, int]]]:
    """A gap above the threshold starts a new burst."""
    bursts: list[list[tuple[int, int]]] = [[events[0]]]
    for gap, ev in zip(gaps, events[1:], strict=False):
        if gap > threshold:
            bursts.append([ev])
        else:
            bursts[-1].append(ev)
    return bursts


def burst_threshold(events: list[tuple[int, int]], gaps: list[float], max_commit: int) -> float:
    """The gap that separates steps from the tokens inside one step.

    The natural break: the largest ratio between consecutive sorted gaps (gaps floored at
    GAP_FLOOR_S, timer and transport granularity), among breaks whose bursts never exceed
    `max_commit` tokens (so a few stalls cannot pass for the step level: splitting there would
    merge many steps into one burst). A threshold relative to the large gaps, never to the
    median of all gaps (~0 when most events are intra-burst). No break of at least
    MIN_BREAK_RATIO: every token is its own step (no speculation or no bursts to see).
    """
    if not gaps:
        return 0.0
    srt = sorted(max(g, GAP_FLOOR_S) for g in gaps)
    candidates = sorted(
        ((srt[j + 1] / srt[j], j) for j in range(len(srt) - 1) if srt[j + 1] > srt[j]),
        reverse=True,
    )[:MAX_BREAK_CANDIDATES]
    for ratio, j in candidates:
        if ratio < MIN_BREAK_RATIO:
            break
        threshold = math.sqrt(srt[j] * srt[j + 1])
        bursts = _group(events, gaps, threshold)
        if max(sum(n for _, n in b) for b in bursts[1:] or [[(0, 0)]]) <= max_commit:
            return threshold
    return srt[0] / 2  # below every gap: one token per step


def _counted_threshold(
    events: list[tuple[int, int]], gaps: list[float], max_commit: int, steps: int
) -> float | None:
    """The threshold that makes exactly `steps` bursts after the first, when the gaps break
    there (COUNTED_BREAK_RATIO) and no burst exceeds `max_commit` tokens; else None."""
    if not 0 < steps <= len(gaps):
        return None
    desc = sorted((max(g, GAP_FLOOR_S) for g in gaps), reverse=True)
    above, below = desc[steps - 1], (desc[steps] if steps < len(desc) else 0.0)
    if below > 0 and above / below < COUNTED_BREAK_RATIO:
        return None
    threshold = math.sqrt(above * below) if below > 0 else above / 2
    bursts = _group(events, gaps, threshold)
    if len(bursts) - 1 != steps or max(sum(n for _, n in b) for b in bursts[1:]) > max_commit:
        return None
    return threshold


def _burst_steps(
    events: list[tuple[int, int]],
    prompt: int | None,
    max_commit: int,
    request_index: int,
    counted_steps: int | None = None,
) -> tuple[list[Step], float, bool, str, str]:
    """Bursts as steps: (steps, threshold, unambiguous, why not, how the threshold was set)."""
    gaps = [(b[0] - a[0]) / 1e9 for a, b in itertools.pairwise(events)]
    threshold = burst_threshold(events, gaps, max_commit)
    bursts = _group(events, gaps, threshold)
    counted = ""
    if counted_steps is not None and len(bursts) - 1 != counted_steps:
        at = _counted_threshold(events, gaps, max_commit, counted_steps)
        if at is not None:
            counted = (
                f"the server counted {counted_steps} steps where the largest break "
                f"gave {len(bursts) - 1}: grouped at the break that gives its count"
            )
            threshold, bursts = at, _group(events, gaps, at)
    steps: list[Step] = []
    pos = sum(n for _, n in bursts[0])
    for prev, cur in itertools.pairwise(bursts):
        n = sum(x for _, x in cur)
        steps.append(
            Step(
                t_end_ns=cur[-1][0],
                commit_len=n,
                step_s=(cur[0][0] - prev[0][0]) / 1e9,
                context_len=_context(prompt, pos),
                output_pos=pos,
                source="burst",
                request_index=request_index,
            )
        )
        pos += n
    near = [g for g in gaps if 0.5 * threshold < g < 2 * threshold and g > GAP_FLOOR_S]
    ambiguous = len(near) > 0.1 * len(gaps)
    why = (
        f"{len(near)} of {len(gaps)} gaps lie near the burst threshold {threshold * 1e3:.2f} ms"
        if ambiguous
        else ""
    )
    return steps, threshold, not ambiguous, why, counted


def _event_steps(
    trace: RequestTrace, prompt: int | None, reason: str, note: str = ""
) -> StepReconstruction:
    """Per-token events where every step committed one token: each event a step, events of one
    read timed by an even split of its gap (`_chunk_steps`)."""
    reads = trace.reads()
    if len(reads) < 2:
        return StepReconstruction([], False, "none", "all tokens arrived in one read")
    steps = _chunk_steps(reads, prompt, trace.index)
    return StepReconstruction(steps, True, "chunk", reason, notes=[note] if note else [])


def _per_token_client(
    trace: RequestTrace,
    events: list[tuple[int, int]],
    max_commit_len: int | None,
    prompt: int | None,
) -> StepReconstruction:
    """One event per token: each event a step where the server says nothing was drafted or the
    bursts are late reads; otherwise the bursts are the steps."""
    if _drafted_nothing(trace):
        return _event_steps(
            trace,
            prompt,
            f"the server reports no drafts in this request "
            f"({trace.server_spec.source}): each token event is a step",
        )
    counted = trace.server_spec.decode_steps if trace.server_spec else None
    steps, threshold, ok, why, how = _burst_steps(
        events, prompt, max_commit_len or DEFAULT_MAX_COMMIT, trace.index, counted
    )
    if not _multi_token_steps(trace) and _bursts_are_late_reads(steps, threshold):
        # nothing from the server says a step committed several tokens, and the bursts took
        # as long per token as the single tokens did: a loaded client read separate steps
        # together (plain decoding read late), not one step's tokens
        mean = sum(s.commit_len for s in steps) / len(steps)
        return _event_steps(
            trace,
            prompt,
            "each token event is a step: the multi-token bursts took as long "
            "per token as single tokens did (late reads of separate steps)",
            note=f"{len(steps)} bursts at {threshold * 1e3:.2f} ms would have made "
            f"{mean:.2f} tokens a step",
        )
    reasons = [why] if why else []
    if max_commit_len is not None:
        big = [s.commit_len for s in steps if s.commit_len > max_commit_len]
        if big:
            ok = False
            reasons.append(
                f"a burst of {max(big)} tokens exceeds the max commit length {max_commit_len}"
            )
    if counted is not None and len(steps) != counted:
        # no break between the gaps gives the server's count: a late read merged steps' bursts
        # (or a stall split one); the bursts are not the steps
        ok = False
        reasons.append(f"{len(steps)} bursts where the server counted {counted} steps")
    reason = "; ".join(reasons) or (
        f"per-token events grouped into bursts (threshold {threshold * 1e3:.2f} ms)"
    )
    return StepReconstruction(
        steps, ok, "burst", reason, burst_threshold_s=threshold, notes=[how] if how else []
    )


def _chunk_problems(
    steps: list[Step],
    events: list[tuple[int, int]],
    reads: list[list[tuple[int, int]]],
    read_gaps: list[float],
    max_commit_len: int | None,
) -> tuple[list[str], list[str]]:
    """(problems, notes): every sign that chunks are not one verify step each; a problem makes
    the steps unreliable, a note (an odd late read) only says what was seen."""
    problems: list[str] = []
    notes: list[str] = []
    if max_commit_len is not None:
        big = [s.commit_len for s in steps if s.commit_len > max_commit_len]
        if big:
            # a stream that merges steps does so all the time; an odd late read (a loaded client,
            # TCP coalescing) merges a step or two and leaves the other steps as they were
            msg = (
                f"{len(big)} chunks carry more tokens (up to {max(big)}) than the max "
                f"commit length {max_commit_len}: chunks merge steps"
            )
            (problems if len(big) > max(1.0, 0.05 * len(steps)) else notes).append(msg)
    shared = sum(len(r) for r in reads[1:] if len(r) > 1)
    if shared:
        msg = (
            f"{shared} step events arrived in the same read as another: each is a step, "
            "timed by an even split of the read's gap"
        )
        # Where some event carries several tokens the server writes one event per step, so only
        # the split timing is uncertain. Where every event is one token, a read holding several
        # may be one step's tokens streamed one by one: the step count itself is in doubt.
        packed = any(s.commit_len > 1 for s in steps)
        frequent = shared > max(1.0, 0.05 * len(events))
        late = _late_reads(reads, read_gaps)
        (problems if not packed and frequent and not late else notes).append(msg)
    middle = [s.commit_len for s in steps[:-1]]
    if (
        len(middle) >= 5
        and len(set(middle)) == 1
        and middle[0] > 1
        and (max_commit_len is None or middle[0] < max_commit_len)
    ):
        problems.append(
            f"every chunk carries exactly {middle[0]} tokens: the server streams every "
            f"{middle[0]} tokens (stream interval > 1) or accepts every draft; "
            "give the max commit length to tell"
        )
    # per event: a late read holding k events took k steps' time, which is no merging
    base = _multiple_of_base([g / len(r) for g, r in zip(read_gaps, reads[1:], strict=True)])
    if base is not None:
        problems.append(
            f"chunk gaps are whole multiples of {base * 1e3:.2f} ms: chunks merge steps"
        )
    return problems, notes


def _client(
    trace: RequestTrace, max_commit_len: int | None, prompt: int | None
) -> StepReconstruction:
    events = trace.token_events()
    if len(events) < 2:
        return StepReconstruction([], False, "none", "fewer than two token-bearing chunks")
    idx = trace.index
    if _is_per_token(trace, events):
        return _per_token_client(trace, events, max_commit_len, prompt)

    reads = trace.reads()
    if len(reads) < 2:
        return StepReconstruction([], False, "none", "all tokens arrived in one read")
    steps = _chunk_steps(reads, prompt, idx)
    read_gaps = [(b[0][0] - a[0][0]) / 1e9 for a, b in itertools.pairwise(reads)]
    problems, notes = _chunk_problems(steps, events, reads, read_gaps, max_commit_len)
    if problems:
        return StepReconstruction(steps, False, "chunk", "; ".join(problems), notes=notes)
    first_read = len(reads[0])
    base_reason = "one chunk per verify step"
    if first_read > 1:
        base_reason += f" (the first read held {first_read} events: the steps in it are not timed)"
    return StepReconstruction(steps, True, "chunk", base_reason, notes=notes)


def _server(
    trace: RequestTrace, check: ServerStepCheck, client: StepReconstruction, prompt: int | None
) -> StepReconstruction:
    """Steps from a server list that covers every step (the cross-check passed): exact commit
    lengths; times from the client chunks when their count matches, else the decode window
    spread evenly (then `timed_by_client` is False)."""
    commits = list(check.commits)
    events = trace.token_events()
    first_tokens = events[0][1] if events else 1
    same_count = client.method in ("chunk", "burst") and len(client.steps) == len(commits)
    steps: list[Step] = []
    pos = first_tokens
    if same_count:
        times = [(s.t_end_ns, s.step_s) for s in client.steps]
    else:
        window = trace.decode_window()
        t0 = events[0][0] if events else trace.t_send_ns
        per = (window[1] / len(commits)) if window and commits else 0.0
        times = [(t0 + int(per * 1e9 * (i + 1)), per) for i in range(len(commits))]
    for c, (t_end, step_s) in zip(commits, times, strict=False):
        steps.append(
            Step(
                t_end_ns=t_end,
                commit_len=c,
                step_s=step_s,
                context_len=_context(prompt, pos),
                output_pos=pos,
                source="server",
                request_index=trace.index,
            )
        )
        pos += c
    timing = "client chunk times" if same_count else "decode window spread evenly"
    return StepReconstruction(
        steps,
        True,
        "server",
        f"server per-step data, checked against the stream ({timing})",
        cross_check=check.verdict,
        notes=client.notes,
        timed_by_client=same_count,
        server_check=check,
    )


def _client_commits(client: StepReconstruction) -> list[int] | None:
    return [s.commit_len for s in client.steps] if client.steps else None


def one_token_steps(rec: StepReconstruction) -> StepReconstruction:
    """The reconstruction of a request served without speculation: every step commits one
    token, so a step of k tokens (a chunk the server merged when its consumer fell behind, or
    a late client read) is k steps, its time split evenly. Sums and means stay exact; those
    steps' individual times are an even split (noted)."""
    merged = [s for s in rec.steps if s.commit_len > 1]
    if not merged:
        return rec
    steps: list[Step] = []
    for s in rec.steps:
        share = s.step_s / s.commit_len
        steps.extend(
            s.model_copy(
                update={
                    "commit_len": 1,
                    "step_s": share,
                    "output_pos": s.output_pos + j,
                    "context_len": None if s.context_len is None else s.context_len + j,
                }
            )
            for j in range(s.commit_len)
        )
    note = (
        f"speculation is off: {len(merged)} step(s) of several tokens split into one-token "
        "steps (merged chunks or late reads), their time split evenly"
    )
    return dataclasses.replace(rec, steps=steps, notes=[*rec.notes, note])


def reconstruct_steps(
    trace: RequestTrace, *, max_commit_len: int | None = None, prompt_tokens: int | None = None
) -> StepReconstruction:
    """Steps of one request, the method used, and whether to trust them (with the reason)."""
    prompt = prompt_tokens
    if prompt is None:
        prompt = trace.spec.prompt_tokens or trace.prompt_tokens_reported
    client = _client(trace, max_commit_len, prompt)
    # A request cut short by the client (Ctrl-C) streamed every step it got to whole; any
    # other failure may have cut the stream inside a step or garbled it.
    if trace.error is not None and trace.error.kind != CANCELLED:
        client.reliable = False
        client.reason = f"request failed ({trace.error.kind}); {client.reason}"
    f = trace.server_spec
    if f is not None and f.per_step_accepted:
        check = check_server_steps(
            f.per_step_accepted,
            stream_decode_tokens(trace),
            _client_commits(client),
            cut_by_max_tokens=_cut_by_max_tokens(trace),
        )
        if check.covers == EVERY_STEP and not (
            client.reliable and not check.client_agrees and check.client_steps == check.all_steps
        ):
            return _server(trace, check, client, prompt)
        # drafted steps only, or a list the stream contradicts: the client's all-steps steps
        # stay, the server's list is evidence beside them
        client.server_check = check
        client.cross_check = check.verdict
        # fewer client steps than the list implies is merging, unless the check lined them up
        # (the shortfall is then steps that arrived in the prefill chunk's read, not timed)
        if (
            client.reliable
            and check.client_steps is not None
            and not check.client_agrees
            and (check.covers == DRAFTED_STEPS and check.client_steps < check.all_steps)
        ):
            client.reliable = False
            client.reason += (
                f"; {check.client_steps} client steps where the server's list and "
                f"the stream's token count imply {check.all_steps}: chunks merge steps"
            )
        return client
    server_l = server_commit(trace)
    cl = client.mean_commit_len
    if server_l is not None and server_l.mean_commit_len and client.steps and cl:
        # the same figure in the convention that counts the prefill token as a step's
        # (completion_tokens / verify count): agreement in either convention is agreement
        first = (trace.completion_tokens or trace.tokens_received) - stream_decode_tokens(trace)
        cl_prefill = (client.total_commit + first) / (len(client.steps) + 1)
        _cross_check_summary(client, cl, server_l.mean_commit_len, server_l.source, cl_prefill)
    return client


def _cross_check_summary(
    client: StepReconstruction, cl: float, sl: float, source: str, cl_prefill: float | None = None
) -> None:
    """Client mean commit length vs the server's all-steps figure for the same tokens. Where they
    disagree the side with too few steps is wrong: fewer client steps means the chunks merge
    steps; more client chunks than the server has steps means the server undercounts (a chunk is
    at least one step), unless the client grouped per-token events into bursts, which can split
    a step."""
    rel = abs(cl - sl) / sl
    head = f"client mean commit {cl:.2f} vs server {sl:.2f} ({source})"
    if rel <= DISAGREEMENT or (
        cl_prefill is not None and abs(cl_prefill - sl) / sl <= DISAGREEMENT
    ):
        client.cross_check = head + " (agree)"
        return
    if cl < sl and client.method == "chunk":
        client.cross_check = head + (
            " (disagree: the stream's chunks show more steps than the server counts, and a chunk "
            "is at least one step, so the server's figure is wrong)"
        )
        return
    unit = "bursts" if client.method == "burst" else "chunks"
    why = f"the client's {unit} merge steps" if cl > sl else "the client's bursts may split steps"
    client.cross_check = head + f" (disagree: {why})"
    if client.reliable:
        client.reliable = False
        client.reason += (
            f"; disagrees with the server's all-steps mean commit length {sl:.2f}: {why}"
        )


def _cut_by_max_tokens(trace: RequestTrace) -> bool:
    """The request stopped at max_tokens (its last step may have been cut short)."""
    if trace.finish_reason == "length":
        return True
    mt = trace.spec.max_tokens
    return bool(mt and trace.completion_tokens is not None and trace.completion_tokens >= mt)
