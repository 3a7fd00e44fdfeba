"""Virtual-time runs: RequestTraces built from simulated verify steps, with the truth kept.

The accuracy suite (tests and bench/diagnosis_accuracy.py) checks a diagnosis against the exact
truth without sleeping: the twin's pure `simulate_request_steps` gives every step's commit
length and duration, and this module turns them into what a client would have recorded (chunk
times = cumulative step times after prefill; one chunk per step, or SGLang-style coalescing
`completion_tokens % N == 0`). Pure: the simulator is passed in as a callable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from specscope.trace import tags
from specscope.trace.model import Chunk, RequestSpec, RequestTrace, Run, RunInfo, ServerSpecFields
from specscope.twin import scenario as tw

# (prompt_tokens, max_tokens, seed) -> [(commit_len, step_s), ...] for one request at C=1
StepSimulator = Callable[[int, int, int], Iterable[tuple[int, float]]]
# (prompt_tokens, max_tokens, seeds) -> per request [(commit_len, step_s), ...] for len(seeds)
# identical requests stepped together as one continuous batch
BatchSimulator = Callable[[int, int, list[int]], list[list[tuple[int, float]]]]


@dataclass(frozen=True)
class PlanItem:
    tag: str
    prompt_tokens: int
    max_tokens: int
    repeats: int = 1
    concurrency: int = 1  # requests sent at once per repeat (stepped as one batch)


def story_plan(
    *,
    full_prompt: int = 2701,
    full_tokens: int = 1500,
    sweep: tuple[int, ...] = (512, 1024, 2048, 3072, 4096),
    sweep_tokens: int = 128,
    two_point_prompt: int = 3072,
    n1: int = 64,
    n2: int = 256,
    repeats: int = 2,
    two_point: bool = True,
) -> list[PlanItem]:
    """The story's measurements as a plan: the user's full generation (2701 -> 1500), a context
    sweep with short outputs, and a two-point pair (~200-token window, as in the story)."""
    plan = [PlanItem(tags.FULL_GENERATION, full_prompt, full_tokens, 1)]
    plan += [PlanItem(tags.make(tags.CONTEXT_SWEEP, p), p, sweep_tokens, repeats) for p in sweep]
    if two_point:
        plan += [
            PlanItem(tags.make(tags.TWO_POINT, "n1"), two_point_prompt, n1, repeats + 1),
            PlanItem(tags.make(tags.TWO_POINT, "n2"), two_point_prompt, n2, repeats + 1),
        ]
    return plan


def trace_from_steps(
    steps: list[tuple[int, float]],
    *,
    spec: RequestSpec,
    index: int,
    t_send_ns: int,
    prefill_s: float,
    stream_interval: int = 1,
    server_fields: bool = True,
    per_token_events: bool = False,
    event_gap_s: float = 20e-6,
) -> RequestTrace:
    """What a client records for these steps. The first chunk arrives after prefill plus the
    first verify step (TTFT); later chunks at cumulative step ends. With `per_token_events` a
    step's tokens arrive one event each, `event_gap_s` apart (llama.cpp-style bursts)."""
    t = float(t_send_ns) + prefill_s * 1e9
    cum = 0
    pending = 0
    chunks: list[Chunk] = []
    for i, (k, s) in enumerate(steps):
        t += s * 1e9
        cum += k
        pending += k
        last = i == len(steps) - 1
        if per_token_events:
            for j in range(k):
                chunks.append(Chunk(t_ns=round(t + j * event_gap_s * 1e9), n_tokens=1, n_chars=4))
            pending = 0
        elif stream_interval <= 1 or cum % stream_interval == 0 or last:
            chunks.append(Chunk(t_ns=round(t), n_tokens=pending, n_chars=4 * pending))
            pending = 0
    server = None
    if server_fields and steps:
        hist: dict[int, int] = {}
        for k, _ in steps:
            hist[k - 1] = hist.get(k - 1, 0) + 1
        server = ServerSpecFields(
            verify_ct=len(steps),
            accept_length=cum / len(steps),
            accept_histogram=[hist.get(j, 0) for j in range(max(hist) + 1)],
            source="virtual.meta_info",
        )
    return RequestTrace(
        index=index,
        request_id=f"virt-{index}",
        spec=spec,
        t_send_ns=t_send_ns,
        chunks=chunks,
        token_count_source="events" if per_token_events else "meta_info",
        completion_tokens=cum,
        prompt_tokens_reported=spec.prompt_tokens,
        finish_reason="length",
        server_spec=server,
        t_end_ns=(chunks[-1].t_ns if chunks else round(t)) + 1000,
    )


@dataclass
class VirtualRun:
    run: Run
    true_steps: dict[int, list[tuple[int, float]]] = field(default_factory=dict)  # by request index

    def truth(self, tag_prefix: str = tags.FULL_GENERATION) -> tuple[float, float, float]:
        """(tokens, steps, seconds) over every true step of the requests with this tag."""
        tok = n = sec = 0.0
        for r in self.run.requests:
            if r.spec.tag.startswith(tag_prefix):
                st = self.true_steps[r.index]
                tok += sum(k for k, _ in st)
                n += len(st)
                sec += sum(s for _, s in st)
        return tok, n, sec


def _run(requests: list[RequestTrace], run_id: str, server_info: dict[str, Any] | None) -> Run:
    """The run of a virtual plan: virtual runs replay the twin, which serves the SGLang flavor
    (meta_info fields); `server_info` is what the server states of itself."""
    info = RunInfo(
        run_id=run_id,
        kind="diagnose",
        status="complete",
        started_perf_ns=0,
        flavor="sglang",
        server_info=server_info or {},
    )
    return Run(info=info, requests=requests)


def virtual_run(
    simulate: StepSimulator,
    plan: list[PlanItem],
    *,
    prefill: Callable[[int], float] = lambda p: 0.02 + 1.2e-5 * p,
    seed: int = 0,
    stream_interval: int = 1,
    server_fields: bool = True,
    per_token_events: bool = False,
    run_id: str = "virtual",
    server_info: dict[str, Any] | None = None,
) -> VirtualRun:
    """Simulate every request of the plan one after another (concurrency 1) on a virtual clock."""
    requests: list[RequestTrace] = []
    true_steps: dict[int, list[tuple[int, float]]] = {}
    t_ns = 1_000_000_000
    index = 0
    for item in plan:
        for _ in range(item.repeats):
            steps = [
                (int(k), float(s))
                for k, s in simulate(item.prompt_tokens, item.max_tokens, seed * 100_003 + index)
            ]
            spec = RequestSpec(
                prompt_tokens=item.prompt_tokens, max_tokens=item.max_tokens, tag=item.tag
            )
            tr = trace_from_steps(
                steps,
                spec=spec,
                index=index,
                t_send_ns=t_ns,
                prefill_s=prefill(item.prompt_tokens),
                stream_interval=stream_interval,
                server_fields=server_fields,
                per_token_events=per_token_events,
            )
            requests.append(tr)
            true_steps[index] = steps
            t_ns = (tr.t_end_ns or t_ns) + 5_000_000
            index += 1
    return VirtualRun(run=_run(requests, run_id, server_info), true_steps=true_steps)


def scenario_run(
    sc: tw.Scenario, plan: list[PlanItem], *, seed: int, run_id: str = "virtual"
) -> VirtualRun:
    """A twin scenario's step model run through `plan`, streamed as the scenario streams (its
    stream interval, per-token events): the run a server like it would give, on a virtual
    clock."""
    return virtual_run(
        lambda p, n, s: tw.simulate_request(sc, p, n, s),
        plan,
        prefill=lambda p: tw.prefill_time(sc, p),
        seed=seed,
        stream_interval=sc.streaming.stream_interval,
        per_token_events=sc.streaming.per_token_events,
        run_id=run_id,
    )


def sweep_plan(
    levels: tuple[int, ...] = (1, 2, 4, 8, 16),
    *,
    prompt_tokens: int = 512,
    max_tokens: int = 128,
    contexts: tuple[int, ...] = (256, 1024, 2048, 4096),
    context_tokens: int = 64,
    repeats: int = 2,
) -> list[PlanItem]:
    """A breakeven measurement: a concurrency sweep (each level `repeats` rounds) and a context
    sweep at concurrency 1, as `diagnose --concurrency` runs them."""
    plan = [
        PlanItem(tags.make(tags.CONCURRENCY_SWEEP, c), prompt_tokens, max_tokens, repeats, c)
        for c in levels
    ]
    plan += [
        PlanItem(tags.make(tags.CONTEXT_SWEEP, p), p, context_tokens, repeats) for p in contexts
    ]
    return plan


def virtual_batched_run(
    simulate: BatchSimulator,
    plan: list[PlanItem],
    *,
    prefill: Callable[[int], float] = lambda p: 0.02 + 1.2e-5 * p,
    seed: int = 0,
    run_id: str = "virtual",
    server_info: dict[str, Any] | None = None,
) -> VirtualRun:
    """Simulate the plan on a virtual clock, each round of `concurrency` requests sent at once
    and stepped as one batch: the server prefills them one after another, then every step serves
    all that are still running (so each request's first token waits for every prefill)."""
    requests: list[RequestTrace] = []
    true_steps: dict[int, list[tuple[int, float]]] = {}
    t_ns = 1_000_000_000
    index = 0
    for item in plan:
        for _ in range(item.repeats):
            seeds = [seed * 100_003 + index + j for j in range(item.concurrency)]
            per_request = simulate(item.prompt_tokens, item.max_tokens, seeds)
            pre = prefill(item.prompt_tokens) * item.concurrency
            end = t_ns
            for steps in per_request:
                steps = [(int(k), float(s)) for k, s in steps]
                spec = RequestSpec(
                    prompt_tokens=item.prompt_tokens, max_tokens=item.max_tokens, tag=item.tag
                )
                tr = trace_from_steps(steps, spec=spec, index=index, t_send_ns=t_ns, prefill_s=pre)
                requests.append(tr)
                true_steps[index] = steps
                end = max(end, tr.t_end_ns or t_ns)
                index += 1
            t_ns = end + 5_000_000
    return VirtualRun(run=_run(requests, run_id, server_info), true_steps=true_steps)
