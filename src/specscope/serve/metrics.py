"""Prometheus metrics named like SGLang's (observability.md §1c), in a registry per app.

Besides SGLang's gauges (set at each decode log, per interval) there are cumulative counters, so a
client can diff two scrapes and get run-scoped acceptance: accept length =
d(spec_accept_tokens_total) / d(spec_verify_steps_total).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
    80.0,
)


class ServeMetrics:
    def __init__(self, model_name: str):
        self.registry = CollectorRegistry()
        labels = {
            "model_name": model_name,
            "engine_type": "unified",
            "tp_rank": "0",
            "pp_rank": "0",
        }
        names = list(labels)
        r = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, names, registry=r).labels(**labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, names, registry=r).labels(**labels)

        def hist(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, names, buckets=_LATENCY_BUCKETS, registry=r).labels(
                **labels
            )

        self.spec_accept_length = gauge(
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
        )
        self.spec_accept_rate = gauge(
            "sglang:spec_accept_rate",
            "Speculative acceptance rate (accepted drafts / proposed drafts in batch).",
        )
        self.num_running_reqs = gauge("sglang:num_running_reqs", "Running requests.")
        self.num_queue_reqs = gauge("sglang:num_queue_reqs", "Requests waiting to be admitted.")
        self.gen_throughput = gauge("sglang:gen_throughput", "Generation throughput (token/s).")
        self.generation_tokens = counter("sglang:generation_tokens", "Generated tokens.")
        self.prompt_tokens = counter("sglang:prompt_tokens", "Prefilled prompt tokens.")
        self.num_requests = counter("sglang:num_requests", "Finished requests.")
        self.num_aborted = counter("sglang:num_aborted_requests", "Requests aborted or failed.")
        self.spec_verify_steps = counter(
            "sglang:spec_verify_steps", "Per-request verify steps (cumulative)."
        )
        self.spec_accept_tokens = counter(
            "sglang:spec_accept_tokens", "Tokens committed by verify steps, bonus included."
        )
        self.spec_accepted_drafts = counter("sglang:spec_accepted_drafts", "Accepted drafts.")
        self.spec_proposed_drafts = counter("sglang:spec_proposed_drafts", "Proposed drafts.")
        self.forward_steps = counter("sglang:forward_steps", "Batched decode forward passes.")
        self.ttft = hist("sglang:time_to_first_token_seconds", "Time to first token (s).")
        self.itl = hist(
            "sglang:inter_token_latency_seconds",
            "Inter-token latency: chunk interval / tokens in the chunk, one sample per token (s).",
        )
        self.e2e = hist("sglang:e2e_request_latency_seconds", "End-to-end request latency (s).")
        # Where a batched step's wall time goes (ours, no SGLang name; issue #38): each a
        # seconds total over the steps counted by forward_steps, so two scrapes give the means.
        # With the engine (stepped by serve's step loop) all five are measured on that loop
        # and add up to its step period; with the twin (an asyncio task) on the event loop.
        self.step_engine = counter(
            "specscope:step_engine_seconds",
            "The backend's own time per step (the engine's forward, sampling, bookkeeping).",
        )
        self.step_wait = counter(
            "specscope:step_wait_seconds",
            "A step call's time beyond the backend's own: the engine's lock and the interpreter "
            "(step thread), or the event loop's delay in resuming the scheduler (asyncio task).",
        )
        self.step_post = counter(
            "specscope:step_post_seconds",
            "The step loop's work after a step: freeing finished requests and handing the step "
            "to the event loop (step thread), or counters, logs and events (asyncio task).",
        )
        self.step_between = counter(
            "specscope:step_between_seconds",
            "From one step's end to the next one's start while requests run, less the "
            "prefills (reaping, the hand-off; with the asyncio task the event loop's other work).",
        )
        self.step_prefill = counter(
            "specscope:step_prefill_seconds",
            "Prefilling the requests admitted between two steps (every running stream waits).",
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
