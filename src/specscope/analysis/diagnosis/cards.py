"""What specscope can conclude: one card per finding id (ARCHITECTURE §6 holds the same table).

A card is read before the rule that decides it (findings.py): the claim in one sentence, the
test that decides it, the smallest effect that matters and its unit, every other threshold the
rule uses (named, so no gate hides in another module), the causes that can produce it (a closed
list, `Cause`), the experiment that tells those causes apart, the ranking weight, the next-step
text (advice.py, in the diagnosed server's own words) and whether the claim is about a drafter
(made only when the speculation state is on, §6.1).

A finding names an effect; a cause names the mechanism behind it. Several causes produce the
same effect (step time that grows along a generation: a host loop doing per-token work, a KV
layout that scatters, attention over a longer context), so a card lists its candidates and the
experiment that separates them, and the diagnosis chooses among them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from specscope.analysis.client_health import LIMIT_SHARE
from specscope.analysis.diagnosis import advice
from specscope.analysis.fits.acceptance import EFFECT_T
from specscope.analysis.fits.steptime import DRIFT_MIN_NOISE, DRIFT_MIN_SHARE, DRIFT_Z


class Cause(StrEnum):
    """The mechanisms a finding can be blamed on: a closed list (a new cause is a new member,
    its card entries and its separating experiment)."""

    host_per_token = "host_per_token"  # host work that grows with the output (detokenizing it all)
    kv_layout = "kv_layout"  # KV pages scattered or reallocated as the sequence grows
    attention_context = "attention_context"  # attention cost growing with context, as it should
    acceptance_position = "acceptance_position"  # drafts accepted less further into a generation
    draft_window = "draft_window"  # the drafter sees only the last W tokens of context
    acceptance_concurrency = "acceptance_concurrency"  # acceptance or step cost worse in a batch
    drafter_quality = "drafter_quality"  # the drafter guesses this text poorly
    # sampled requests: the target's own spread caps what any drafter commits a step
    sampling_temperature = "sampling_temperature"
    speculation_overhead = "speculation_overhead"  # a verify step costs more than it commits
    graph_mode = "graph_mode"  # steps off the captured CUDA graphs (eager fallback)
    stream_coalescing = "stream_coalescing"  # the stream merges steps (stream interval > 1)
    prefix_cache = "prefix_cache"  # prefill not served from the prefix cache
    client = "client"  # the measuring client itself (a late event loop, merged reads)


# Each cause's mechanism in words, as the verdict names it beside the cause id (verdict.py).
MECHANISM: Mapping[Cause, str] = MappingProxyType(
    {
        Cause.host_per_token: "host work that grows with the output (re-reading all of it "
        "every step)",
        Cause.kv_layout: "KV pages scattered or reallocated as the sequence grows",
        Cause.attention_context: "attention cost growing with the context, as it should",
        Cause.acceptance_position: "drafts accepted less the further a generation goes "
        "(early tokens are easy)",
        Cause.draft_window: "the drafter sees only the last tokens of the context (its window)",
        Cause.acceptance_concurrency: "acceptance or step cost worse in a batch",
        Cause.drafter_quality: "the drafter guesses this text poorly",
        Cause.sampling_temperature: "requests sampled above temperature 0: the target's own "
        "spread caps what any drafter commits a step",
        Cause.speculation_overhead: "a verify step costs more than it commits",
        Cause.graph_mode: "steps off the captured CUDA graphs (eager fallback)",
        Cause.stream_coalescing: "the stream merges steps (stream interval above 1)",
        Cause.prefix_cache: "prefill not served from the prefix cache",
        Cause.client: "the measuring client itself (a late event loop, merged reads)",
    }
)


@dataclass(frozen=True)
class RuleCard:
    """One finding id: what is concluded, how it is decided, what can cause it, what to do."""

    id: str
    claim: str  # what a reported finding says, in one sentence
    test: str  # the test that decides it (analysis/fits/significance.py)
    min_effect: float  # the smallest effect that matters, in `unit`
    unit: str
    causes: tuple[Cause, ...]  # the mechanisms that produce this effect
    separates: str  # the experiment that tells those causes apart
    next: Callable[..., str]  # the next-step text, by server flavor (advice.py)
    weight: float = 1.0  # ranking weight on confidence x |log cost| (< 1: a consequence)
    needs_speculation: bool = False  # a claim about a drafter: only when speculation is on
    validity: bool = False  # a check of the measurement itself: ranked before every effect
    # a claim that rests on the client's stamps of the stream (per-step times, the steps read
    # from it): not made when the client was the limit (client_health, card client_limited)
    timed_by_client: bool = False
    thresholds: Mapping[str, float] = field(default_factory=dict)  # every other gate, named
    # the cause under which the effect is how a healthy server behaves (attention cost growing
    # with the context): a finding with it, or with its cause undecided, ranks after every
    # finding of a fault, however large (None: every cause of the card is a fault)
    expected: Cause | None = None
    # per cause, its part of `separates`: the verdict's next step names only the parts that
    # bear on the candidates left (empty: `separates` whole)
    separates_by: Mapping[Cause, str] = field(default_factory=dict)

    def separating(self, candidates: Sequence[str]) -> str:
        """The experiment that tells `candidates` (cause ids) apart: the parts of `separates`
        that bear on them, in the card's order, else the whole of it."""
        if not self.separates_by:
            return self.separates
        parts = [self.separates_by[c] for c in self.causes if c in candidates]
        parts = [p for i, p in enumerate(parts) if p not in parts[:i]]
        return "; ".join(parts) or self.separates


C = Cause
# the experiment that tells a verify step's own cost from the graphs' absence
VERIFY_COST = (
    "verify-step cost against a plain step at the same batch (engine step timings), with and "
    "without CUDA graphs"
)

CARDS: tuple[RuleCard, ...] = (
    RuleCard(
        id="client_limited",
        claim="the measuring client answered the stream late by more than a tenth of a step: "
        "step-time and acceptance claims are not made",
        test="counting check: the client's event-loop lag during decode (its mean, the "
        "expected lateness of a stamp) against the median step time (not a sampled effect)",
        min_effect=0.0,
        unit="",
        causes=(C.client,),
        separates="the same load from more client processes (fewer streams each), or the "
        "client on cores of its own",
        next=advice.client,
        validity=True,
        thresholds=MappingProxyType({"mean loop lag, share of the median step": LIMIT_SHARE}),
    ),
    RuleCard(
        id="chunk_coalescing",
        claim="streamed chunks merge verify steps, so client-side steps are unreliable",
        test="counting checks of the stream against the server's steps (not a sampled effect)",
        min_effect=0.0,
        unit="",
        causes=(C.stream_coalescing, C.client),
        separates="stream interval 1 on the server, or the server's per-step logs (--logs)",
        next=advice.chunk_coalescing,
        validity=True,
    ),
    RuleCard(
        id="acceptance_decay",
        claim="commit length falls with output position (early tokens are easy)",
        test="OLS with request fixed effects over long requests' complete steps, best of the "
        "step shapes and a linear fall (Bonferroni), cluster-robust errors",
        min_effect=0.10,
        unit="fraction",
        causes=(C.acceptance_position, C.drafter_quality, C.draft_window),
        separates="the fall within requests (position) against a cliff at one context (the "
        "drafter's window, the window the server states); commit length by prompt category",
        next=advice.acceptance_decay,
        needs_speculation=True,
        # the fit's own gate (acceptance.py) decides only whether the decay's cost is counted
        thresholds=MappingProxyType(
            {"min steps a request needs": 96, "cost counted from |t|": EFFECT_T}
        ),
        timed_by_client=True,
    ),
    RuleCard(
        id="draft_window",
        claim="acceptance drops once the context exceeds the drafter's window",
        test="within requests, the drop at the cut (OLS, request fixed effects); across "
        "requests, a permutation test of the largest drop over prompt-length cuts",
        min_effect=0.10,
        unit="fraction",
        causes=(C.draft_window, C.drafter_quality),
        separates="the window the server states against the cliff's context; prompts of "
        "lengths around the cliff by category",
        next=advice.draft_window,
        needs_speculation=True,
        thresholds=MappingProxyType(
            {
                "stated window slack (tokens)": 64,
                "slack share": 0.15,
                "cost counted from |t|": EFFECT_T,
            }
        ),
        timed_by_client=True,
    ),
    RuleCard(
        id="speculation_overhead",
        claim="speculation is slower than plain decoding here",
        test="tps ratio plain / speculative, bootstrap interval widened by the content variance",
        min_effect=0.05,
        unit="x",
        causes=(C.speculation_overhead, C.graph_mode, C.drafter_quality, C.sampling_temperature),
        separates=f"{VERIFY_COST}; commit length by category; greedy against the used temperature",
        separates_by=MappingProxyType(
            {
                C.speculation_overhead: VERIFY_COST,
                C.graph_mode: VERIFY_COST,
                C.drafter_quality: "commit length by category",
                C.sampling_temperature: "greedy against the used temperature",
            }
        ),
        next=advice.speculation_overhead,
        needs_speculation=True,
        thresholds=MappingProxyType(
            {
                "commit length without a baseline": 1.5,
                "never accepted: tokens per drafted step": 1.05,
            }
        ),
    ),
    RuleCard(
        id="acceptance_low",
        claim="commit length is low for this drafter, or below the baseline's",
        test="the acceptance factor beyond the shape's costs (bootstrap interval), or without a "
        "baseline the mean commit length under 2.0 (z over requests)",
        min_effect=0.10,
        unit="x",
        causes=(C.drafter_quality, C.acceptance_concurrency, C.sampling_temperature),
        separates="the same prompts at concurrency 1 and at the deployment's; greedy against the "
        "used temperature; commit length by category",
        separates_by=MappingProxyType(
            {
                C.acceptance_concurrency: "the same prompts at concurrency 1 and at the "
                "deployment's",
                C.sampling_temperature: "greedy against the used temperature",
                C.drafter_quality: "commit length by category",
            }
        ),
        next=advice.acceptance_low,
        needs_speculation=True,
        thresholds=MappingProxyType({"commit length without a baseline": 2.0}),
        timed_by_client=True,
    ),
    RuleCard(
        id="step_time_drift",
        claim="step time grows with output position beyond what context explains",
        test="output-position slope of the robust step-time fit, cluster-robust error, stalls "
        "left out",
        min_effect=DRIFT_MIN_SHARE,
        unit="fraction of the mean step",
        causes=(C.host_per_token, C.kv_layout, C.client),
        separates="a fresh request whose prompt is as long as the context the generation "
        "reached (the plan's last context point): device-bound cost reappears in it, host work "
        "per output token does not; the server's own step timings against the client's",
        next=advice.step_time_drift,
        # the fit's own gate (steptime.py) decides only whether the drift's cost is counted
        thresholds=MappingProxyType(
            {
                "cost counted from |z|": DRIFT_Z,
                "cost counted from noise sd share": DRIFT_MIN_NOISE,
                "fresh request share: host side below": 0.4,
                "fresh request share: device side above": 0.6,
            }
        ),
        timed_by_client=True,
    ),
    RuleCard(
        id="context_scaling",
        claim="step time grows with context, as attention-bound decode does",
        test="context slope of the robust step-time fit (z), or the growth along the "
        "generation when context and position are confounded",
        min_effect=0.15,
        unit="fraction",
        causes=(C.attention_context, C.kv_layout),
        separates="a context sweep at a fixed output length (the attention slope)",
        next=advice.context_scaling,
        weight=0.5,
        thresholds=MappingProxyType({"confounded growth": 0.25}),
        timed_by_client=True,
        expected=C.attention_context,
    ),
    RuleCard(
        id="two_point_bias",
        claim="a short-window estimate overstates long-generation throughput",
        test="the window's steps against the full generation's, plus one prompt's content "
        "variance a side",
        min_effect=0.15,
        unit="x",
        causes=(C.acceptance_position, C.attention_context, C.host_per_token, C.kv_layout),
        separates="what changes along the generation: commit length (acceptance_decay), step "
        "time (step_time_drift, and its cause) or context (allowed for by the test)",
        next=advice.two_point_bias,
        weight=0.25,
        timed_by_client=True,
    ),
    RuleCard(
        id="prefill_bound",
        claim="time to first token dominates end-to-end time",
        test="t test of ttft / e2e over requests (or the decode time's block error)",
        min_effect=0.05,
        unit="share above 0.5",
        causes=(C.prefix_cache, C.attention_context),
        separates="the same prompt twice (prefix cache hit) and shorter prompts",
        next=advice.prefill_bound,
        thresholds=MappingProxyType({"ttft share of e2e": 0.5}),
    ),
    RuleCard(
        id="batching_interference",
        claim="other requests in the batch slow this one",
        test="Welch over per-request tps at concurrency 1 and the highest concurrency",
        min_effect=0.25,
        unit="x",
        causes=(C.acceptance_concurrency, C.graph_mode, C.host_per_token),
        separates="commit length and step time by concurrency; the server's step timings "
        "against the client's",
        next=advice.batching_interference,
        thresholds=MappingProxyType(
            {
                "per-request tps ratio": 0.8,
                "commit length holds within": 0.10,
                "commit share of the fall, above": 0.5,
            }
        ),
    ),
    RuleCard(
        id="draft_coverage",
        claim="many verify steps draft nothing and commit one token for a full step",
        test="z test of the no-draft share over blocks of 8 steps",
        min_effect=0.10,
        unit="share of steps",
        causes=(C.drafter_quality,),
        separates="the drafter's proposals per step (server counters) by prompt category",
        next=advice.draft_coverage,
        needs_speculation=True,
        thresholds=MappingProxyType({"cost that matters (x)": 1.10}),
        timed_by_client=True,
    ),
)

BY_ID: Mapping[str, RuleCard] = MappingProxyType({c.id: c for c in CARDS})
