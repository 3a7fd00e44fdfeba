"""Flavor-aware `next` advice: the knob a finding points at, named the way the diagnosed
server spells it (reference/observability.md and peers-and-models.md for the flags).

A finding against a llama.cpp server that says "lower --speculative-num-draft-tokens" sends the
reader to a flag that does not exist there; so the few findings whose fix is a server setting
ask this module for the wording of `RunInfo.flavor` (sglang | vllm | llamacpp | anything else ->
generic wording that names no server's flag).
"""

from __future__ import annotations

KNOWN_FLAVORS = ("sglang", "vllm", "llamacpp")


def normalise(flavor: str | None) -> str:
    """The flavor family ('' when unknown: an OpenAI-compatible server of unknown make)."""
    f = (flavor or "").strip().lower().replace(".", "").replace("_", "").replace("-", "")
    if f in ("llamacpp", "llama", "llamaserver"):
        return "llamacpp"
    return f if f in KNOWN_FLAVORS else ""


def draft_window(flavor: str | None, window_tokens: float) -> str:
    at = f"{window_tokens:.0f}"
    return {
        "sglang": f"raise --speculative-dflash-draft-window-size (SGLang) above {at}, or use a "
        "drafter trained for longer context",
        "vllm": f"use a draft model whose context covers more than {at} tokens (--speculative-config "
        "'model' / 'max_model_len' of the drafter), or a drafter trained for longer context",
        "llamacpp": f"give the draft model (-md) a context above {at} tokens (--ctx-size-draft), "
        "or use a draft model trained for longer context",
    }.get(
        normalise(flavor),
        f"raise the drafter's context window (draft window size) above {at} tokens, or use a "
        "drafter trained for longer context",
    )


def context_cliff(window_tokens: float, stated_window: int) -> str:
    """A drop at a context length the drafter's stated window does not explain."""
    return (
        f"not the draft window setting (the server states {stated_window} tokens): compare "
        f"acceptance by prompt category (--workload mixed) and by prompt length around "
        f"{window_tokens:.0f} tokens; a drafter trained on shorter texts than that loses "
        "acceptance there whatever its window"
    )


def speculation_overhead(flavor: str | None) -> str:
    return {
        "sglang": "disable speculation for this workload, or shrink the draft tree (fewer "
        "--speculative-num-draft-tokens / --speculative-num-steps) so a verify step costs less",
        "vllm": "disable speculation for this workload, or lower num_speculative_tokens in "
        "--speculative-config so a verify step costs less",
        "llamacpp": "disable speculation for this workload (drop -md / --spec-type), or draft "
        "less per step (lower --spec-draft-n-max / --draft-max, raise --draft-p-min) so a verify "
        "step costs less",
    }.get(
        normalise(flavor),
        "disable speculation for this workload, or draft fewer tokens per step so a verify step "
        "costs less",
    )


def acceptance_low(flavor: str | None) -> str:
    """What to check when the drafter's guesses are rarely accepted (no baseline)."""
    base = "check temperature (greedy gives the best acceptance), the prompt domain and "
    return (
        base
        + {
            "sglang": "the drafter/target pairing (--speculative-algorithm, "
            "--speculative-draft-model-path)",
            "vllm": "the drafter/target pairing ('method' / 'model' in --speculative-config)",
            "llamacpp": "the drafter: a draft model (-md) of the target's family and tokenizer, or "
            "for n-gram --spec-type text that repeats itself",
        }.get(normalise(flavor), "the drafter/target pairing")
        + "; pass a known-good run as --baseline"
    )


def chunk_coalescing(flavor: str | None) -> str:
    return {
        "sglang": "set --stream-interval 1 on the SGLang server, or pass --logs with per-step "
        "server telemetry",
        "vllm": "set the stream interval to 1 (vLLM stream_interval=1), or pass --logs with "
        "per-step server telemetry",
        "llamacpp": "pass --logs with the server's log (llama.cpp streams one event per token, so "
        "steps come from burst timing) or --metrics-url for the draft counters",
    }.get(
        normalise(flavor),
        "set the server's stream interval to 1 (SGLang --stream-interval 1, vLLM "
        "stream_interval=1), or pass --logs with per-step server telemetry",
    )


def whole_stream(flavor: str | None) -> str:
    """The stream arrives whole: a buffering proxy (nginx buffers responses unless told not to)
    or a stream interval as long as the answer."""
    return (
        "measure the server directly, without the proxy in front of it; where a proxy must stay, "
        "turn its response buffering off for the stream (nginx: proxy_buffering off, or the "
        "response header X-Accel-Buffering: no); then " + chunk_coalescing(flavor)
    )


# The next steps that name no server flag: one text per finding (and variant), the same for
# every flavor; kept here so every `next` of the rule cards (analysis/diagnosis/cards.py) has one home.


def acceptance_decay(flavor: str | None = None) -> str:
    """Acceptance falls along the generation: the drafter's source runs out as the output
    leaves the prompt (a prompt-lookup drafter that never indexes the generated text), or a
    model drafter was trained on short answers."""
    return (
        "check that the drafter drafts from the generated text too, not only the prompt "
        "(prompt lookup: index the output as it grows); measure with the real workload's "
        "prompts and long generations (not a short window); improve or retrain a model "
        "drafter on long free-form/reasoning text"
    )


def speculation_unmeasured(flavor: str | None = None) -> str:
    """Low commit length and no baseline: the experiment that tells whether speculation pays."""
    return (
        "run the same prompt with speculation disabled and pass it as --baseline: "
        "plain decoding faster means speculation is pure overhead here"
    )


def acceptance_below_baseline(flavor: str | None = None) -> str:
    return (
        "check drafter version, temperature and prompt domain against the baseline; "
        "compare the commit-length histograms (specscope compare)"
    )


def step_time_drift(flavor: str | None = None) -> str:
    """Before the cause is known: the two mechanisms and how to tell them apart."""
    return (
        "host work per step that grows with the output (a detokenizer re-reading the whole "
        "output, stop strings scanned over the whole text) or KV pages scattering as the "
        "sequence grows (page size 1): compare a fresh request with a prompt as long as the context reached "
        "(specscope diagnose --quick runs one)"
    )


def host_per_token(flavor: str | None = None) -> str:
    return (
        "profile the server's per-step host path: work that re-reads the whole output each "
        "step (full re-detokenization, stop-string scans over the whole text, per-step "
        "logging or logprobs of the whole sequence); make it incremental (a detokenizer with "
        "prefix and read offsets, as vLLM and TGI do; scan only the new text for stop strings)"
    )


def kv_layout(flavor: str | None = None) -> str:
    return (
        "stateful degradation (KV fragmentation, memory pressure): check page size / KV "
        "allocation (page_size=1 with tree acceptance scatters KV), restart-and-remeasure"
    )


def client(flavor: str | None = None) -> str:
    return (
        "the measuring client fell behind: rerun specscope on cores nothing else uses, near "
        "the server, with fewer concurrent streams per client process, and compare with the "
        "server's own step timings (--logs)"
    )


def graph_mode(flavor: str | None = None) -> str:
    return (
        "check that decode runs on captured CUDA graphs (batch sizes inside the captured set, "
        "no eager fallback; the server's log says which)"
    )


def acceptance_concurrency(flavor: str | None = None) -> str:
    return (
        "a batch commits fewer tokens a step than a request alone: check what limits drafts "
        "per step as the batch grows (a per-step token budget that cuts speculative tokens, "
        "draft length lowered by batch size) and size it for the deployment's concurrency"
    )


def drafter_quality(flavor: str | None = None) -> str:
    return (
        "the drafter guesses this text poorly: compare commit length by prompt category "
        "(--workload mixed) and by prompt length; a drafter trained on this kind of text (for "
        "n-gram lookup, text that repeats its prompt) accepts more"
    )


def sampling_temperature(flavor: str | None = None) -> str:
    return (
        "the requests sample (temperature above 0): a drafted token is kept only where the "
        "target's own sample matches it, so the target's spread caps commit length for any "
        "drafter; run the same prompts greedy (diagnose --temperature 0) to see what the "
        "drafter itself commits, before retraining it"
    )


def for_cause(cause: str, flavor: str | None = None) -> str | None:
    """The next step once a finding's cause is known, where it differs from the finding's own
    advice (None: the finding's advice already is the cause's)."""
    texts = {
        "host_per_token": host_per_token,
        "kv_layout": kv_layout,
        "client": client,
        "graph_mode": graph_mode,
        "acceptance_concurrency": acceptance_concurrency,
        "attention_context": context_scaling,
        "acceptance_position": acceptance_decay,
        "drafter_quality": drafter_quality,
        "sampling_temperature": sampling_temperature,
    }
    text = texts.get(cause)
    return text(flavor) if text else None


def context_confounded(flavor: str | None = None) -> str:
    """Context and output position grew together: the experiment that separates them."""
    return (
        "short prompt, long generation (specscope diagnose --prompt-tokens 64 "
        "--max-tokens 2048) separates output length from context; a context sweep gives "
        "the attention slope"
    )


def context_scaling(flavor: str | None = None) -> str:
    return (
        "expected at concurrency 1; shorter prompts, prefix caching or a faster "
        "attention kernel reduce it"
    )


def two_point_bias(flavor: str | None = None) -> str:
    return (
        "measure with the real generation length (full_generation), or move N1 past the "
        "warm-up region; report both numbers"
    )


def prefill_bound(flavor: str | None = None) -> str:
    return "prefix caching, chunked-prefill size, or shorter prompts; check the queue (#queue-req)"


def batching_interference(flavor: str | None = None) -> str:
    return (
        "measure at the deployment's real concurrency; tune max running requests / "
        "speculative settings per batch size (speculation pays less in large batches)"
    )


def draft_coverage(flavor: str | None = None) -> str:
    return (
        "the drafter finds nothing to propose on these steps (n-gram lookup without a "
        "match): a shorter minimum n-gram, a larger lookup window, or a model-based drafter "
        "(EAGLE, a draft model), which drafts on every step"
    )
