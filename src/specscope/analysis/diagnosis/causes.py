"""The cause behind each reported finding: an id from the closed list (cards.Cause), or none with
the candidates still possible, and the causes ruled out with the evidence why.

A finding names an effect; several mechanisms produce the same effect (a step time that grows
along a generation: a host loop re-reading the whole output, KV pages that scatter, the measuring
client). Each finding's card lists its candidate causes; the functions below rule candidates out
with what the run measured (the experiment the card names, the server's own statement of its
configuration). A cause is named only when every other candidate is ruled out: the diagnosis
never guesses between mechanisms it could not separate, it says which experiment would.

Pure: reads Facts and the findings, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from specscope.analysis.diagnosis import advice
from specscope.analysis.diagnosis.cards import BY_ID, Cause
from specscope.analysis.diagnosis.facts import Facts
from specscope.analysis.result import Finding, FindingTest, RuledOut
from specscope.analysis.steps.speculation import DRAFT_WINDOW_KEYS, stated_draft_window

C = Cause
Excluded = dict[Cause, str]  # cause -> why it is ruled out

# The drift-separating experiment's reading (facts.DriftSeparation.share): the fresh request
# shows at most this share of the generation's growth -> the growth goes with the output
# generated (host side); at least DEVICE_SHARE -> it goes with the context held (device side).
HOST_SHARE = BY_ID["step_time_drift"].thresholds["fresh request share: host side below"]
DEVICE_SHARE = BY_ID["step_time_drift"].thresholds["fresh request share: device side above"]

CLIENT_CONSTANT = (
    "specscope's client does constant work per streamed event (it appends the event and joins "
    "the text once at the end): it adds no time that grows with the output"
)


def _backend(f: Facts) -> Mapping[str, Any]:
    info = f.measured.run.info.server_info or {}
    backend = info.get("backend")
    return backend if isinstance(backend, Mapping) else {}


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms"


def _drift(f: Facts, _: Mapping[str, Finding], __: str) -> Excluded:
    """Host work per output token against the sequence's KV: the fresh request at the context
    the generation reached (facts.drift_separation)."""
    out: Excluded = {C.client: CLIENT_CONSTANT}
    sep = f.drift_separation
    share = sep.share if sep is not None else None
    if sep is None or share is None:
        return out
    fresh = (
        f"{sep.fresh_requests} fresh request(s) with a {sep.fresh_prompt}-token prompt (the "
        f"generation reached {sep.reached_context} tokens of context) step at "
        f"{_ms(sep.fresh_s)}{' (the fastest)' if sep.fresh_requests > 1 else ''}, "
    )
    ends = f"the generation's first steps at {_ms(sep.early_s)}, its last at {_ms(sep.late_s)}"
    low, high = "near the first steps", "near the last steps"
    if sep.base_s is not None:  # the paired base: both fresh requests at one moment's load
        ends += f", fresh requests of its own {sep.base_prompt}-token prompt at {_ms(sep.base_s)}"
        low = "near fresh requests of the generation's own prompt run beside them"
        high = "as far above those as the generation grew"
    contiguous = _kv_contiguous(f)
    if share <= HOST_SHARE and contiguous:
        # KV pages that scatter as decode allocates them one by one would not reappear in a
        # fresh prompt (allocated at once) either: only pages that cannot scatter rule it out
        out[C.kv_layout] = (
            fresh + f"{low} ({share:.0%} of the growth; {ends}), and "
            f"{contiguous}: the extra time goes with the output generated, not with the KV "
            "the sequence holds"
        )
    elif share >= DEVICE_SHARE:
        out[C.host_per_token] = (
            fresh + f"{high} ({share:.0%} of the growth; {ends}): the extra time "
            "comes with the context held, not with the output generated"
        )
    return out


# KV pages of at least this many tokens keep attention's reads in long runs: the page layout
# cannot cost what one-token pages scattered by tree acceptance do (the seed story's suspect).
MIN_CONTIGUOUS_PAGE = 16


def _kv_contiguous(f: Facts) -> str | None:
    """Why the KV layout is not in question, from the server's statement (or None)."""
    info = f.measured.run.info.server_info or {}
    alloc, page = _backend(f).get("kv_alloc"), info.get("page_size")
    if alloc == "scattered" or not isinstance(page, int) or page < MIN_CONTIGUOUS_PAGE:
        return None
    how = " allocated contiguously" if alloc == "contiguous" else ""
    return f"the server states KV pages of {page} tokens{how}"


def _context_scaling(f: Facts, _: Mapping[str, Finding], __: str) -> Excluded:
    why = _kv_contiguous(f)
    return {C.kv_layout: why} if why else {}


def _inherited(
    found: Mapping[str, Finding], finding_id: str, causes: tuple[Cause, ...]
) -> Excluded:
    """The causes another reported finding ruled out, among `causes` (a consequence shares the
    evidence of the effect it follows from)."""
    other = found.get(finding_id)
    if other is None:
        return {}
    return {C(r.id): r.reason for r in other.ruled_out if C(r.id) in causes}


def _two_point(f: Facts, found: Mapping[str, Finding], _: str) -> Excluded:
    """The window's bias follows from what changes along the generation: commit length
    (acceptance_decay), step time (step_time_drift) or context (allowed for by the test)."""
    out: Excluded = {}
    if f.speculation.off:
        out[C.acceptance_position] = "speculation is off: every step commits one token"
    elif "acceptance_decay" not in found:
        out[C.acceptance_position] = "commit length does not fall along the generation"
    if "step_time_drift" not in found:
        why = "step time does not drift along the generation"
        out.update({C.host_per_token: why, C.kv_layout: why})
    else:
        out.update(_inherited(found, "step_time_drift", (C.host_per_token, C.kv_layout)))
    if f.two_point.context_factor is not None:
        out[C.attention_context] = (
            f"the test allows for the context difference (x{f.two_point.context_factor:.3f})"
        )
    return out


def _stated_window(f: Facts) -> int | None:
    stated = stated_draft_window(f.measured.run.info.server_info or {})
    return stated[0] if stated else None


def _decay(f: Facts, found: Mapping[str, Finding], _: str) -> Excluded:
    out: Excluded = {
        C.drafter_quality: "the fall is within requests (request fixed effects): the same "
        "prompt's drafts are accepted less later in its generation"
    }
    stated = _stated_window(f)
    reached = f.span.context[1] if f.span.context else None
    if stated is None and (key := _states_no_window(f)):
        out[C.draft_window] = f"the server states its drafter has no window ({key}: null)"
    elif "draft_window" not in found and (stated is None or (reached and stated >= reached)):
        out[C.draft_window] = "no acceptance cliff at any context cut" + (
            f", and the server's draft window ({stated} tokens) covers the context"
            if stated
            else ""
        )
    return out


def _states_no_window(f: Facts) -> str | None:
    """The key that says the drafter has no window (present, null), or None."""
    info = f.measured.run.info.server_info or {}
    return next((k for k in DRAFT_WINDOW_KEYS if k in info and info[k] is None), None)


def _window(f: Facts, found: Mapping[str, Finding], method: str) -> Excluded:
    stated = _stated_window(f)
    finding = found["draft_window"]
    if stated is None and (key := _states_no_window(f)):
        return {
            C.draft_window: f"the server states its drafter has no window ({key}: null): it "
            "sees the whole context"
        }
    if stated is not None and "not the window" in finding.summary:
        return {
            C.draft_window: f"the server's draft window is {stated} tokens, not where the drop is"
        }
    if stated is not None:
        return {C.drafter_quality: f"the server states a {stated}-token draft window, at the drop"}
    if method.startswith("OLS"):
        return {
            C.drafter_quality: "acceptance drops within the same requests once their context "
            "passes the cut: the same text, a shorter view of it"
        }
    return {}


def _graph_mode(f: Facts) -> str | None:
    """Why CUDA graphs are not in question, from the server's statement (or None). A server
    that states the largest batch its graphs cover (`graph_max_batch`) is held to it: graphs
    that stop below a batch this run sent are in question however the fast path is named."""
    backend = _backend(f)
    if backend.get("device") == "cpu":
        return "the server runs on CPU (no CUDA graphs)"
    cover = backend.get("graph_max_batch")
    if isinstance(cover, int) and not isinstance(cover, bool):
        top = _largest_batch(f)
        if top > cover:
            return None
        return (
            f"the server states CUDA graphs for batches of up to {cover} requests, and this run "
            f"had at most {top} in flight"
        )
    fast = str(backend.get("fast_path") or "")
    if "graph" in fast.lower():
        return f"the server states its decode steps run on captured CUDA graphs ({fast})"
    return None


def _largest_batch(f: Facts) -> int:
    """The most requests this run had in flight at once: its highest concurrency level (the
    plan's other requests run one at a time)."""
    return max((c for c, _, _ in f.concurrency.points), default=1)


def _never_accepted(f: Facts) -> str | None:
    """Why the drafter's guessing is not in question: with speculation on, steps commit ~1
    token (per drafted step where the server says which steps drafted)."""
    per = f.never_accepted
    if per is None:
        return None
    return (
        f"drafts are almost never accepted ({per:.2f} tokens per verify step): not a drafter "
        "that guesses this text poorly but one that never matches its target (a tokenizer or "
        "vocabulary mismatch, a broken drafter)"
    )


def _overhead(f: Facts, _: Mapping[str, Finding], __: str) -> Excluded:
    out: Excluded = {}
    if why := _graph_mode(f):
        out[C.graph_mode] = why
    if why := _never_accepted(f):
        out[C.drafter_quality] = why
    if why := _greedy(f):
        out[C.sampling_temperature] = why
    return out


def _alone(f: Facts) -> str | None:
    """Why concurrency is not in question: the main requests ran one at a time, and no sweep
    went above one request in flight (`--concurrency 1` sweeps nothing)."""
    if any(level > 1 for level, *_ in f.concurrency.points):
        return None
    return "the requests ran one at a time"


def _greedy(f: Facts) -> str | None:
    """Why sampling is not in question: every main request was sent greedy (specscope's client
    sent them, so their temperature is known). At T > 0 a drafted token is kept only where the
    target's own sample matches it: on SmolLM2-135M's long writing at T = 1 a perfect drafter of
    the target's greedy chain commits 1.4 a step (bench/sampled_ceiling.py, docs/dflash.md)."""
    temps = [r.spec.temperature for r in f.measured.main]
    if temps and max(temps) <= 0:
        return "every request was greedy (temperature 0): no sampling spread caps acceptance"
    return None


def _acceptance_low(f: Facts, _: Mapping[str, Finding], __: str) -> Excluded:
    out: Excluded = {}
    if why := _alone(f):
        out[C.acceptance_concurrency] = why
    if why := _greedy(f):
        out[C.sampling_temperature] = why
    return out


def _coalescing(f: Facts, _: Mapping[str, Finding], __: str) -> Excluded:
    interval = (f.measured.run.info.server_info or {}).get("stream_interval")
    if isinstance(interval, int) and interval > 1:
        return {
            C.client: f"the server states a stream interval of {interval}: it merges "
            f"{interval} steps into each chunk itself"
        }
    return {}


# The batching test's separation (cards: batching_interference): commit length at the highest
# concurrency within this share of concurrency 1's holds (acceptance not in question); a fall in
# commit length that makes more than this share of the per-request slowdown (in logs, beside the
# step's growth) is mostly a fall in acceptance, not in what a step costs. Half, not more: on
# the CPU a batch of four costs ~1.6x a step whatever it drafts (clean n-gram server, 108 -> 184
# ms), so a drafter that loses 40% of its tokens a step in a batch makes 53% of the slowdown
# there (the batch-accept row, docs/faults.md); on the H200 the step barely grows.
COMMIT_HOLDS = BY_ID["batching_interference"].thresholds["commit length holds within"]
ACCEPTANCE_SHARE = BY_ID["batching_interference"].thresholds["commit share of the fall, above"]


def _batch_split(f: Facts) -> tuple[str, float, float] | None:
    """(what the sweep shows, commit ratio highest / lowest level, the commit's share of the
    slowdown) from the concurrency sweep's lowest and highest levels, or None without both."""
    pts = sorted(f.concurrency.points)
    if len(pts) < 2:
        return None
    (c1, _, s1), (cn, _, sn) = pts[0], pts[-1]
    l1, ln = f.concurrency.commit.get(c1), f.concurrency.commit.get(cn)
    if not (l1 and ln and s1 and sn):
        return None
    fall, growth = math.log(l1 / ln), max(0.0, math.log(sn / s1))
    share = fall / (fall + growth) if fall > 0 else 0.0
    shows = (
        f"{l1:.2f} -> {ln:.2f} tokens a step and {_ms(s1)} -> {_ms(sn)} a step from "
        f"concurrency {c1} to {cn}"
    )
    return shows, ln / l1, share


def _batching(f: Facts, found: Mapping[str, Finding], __: str) -> Excluded:
    """Commit length and step time by concurrency (the card's separating experiment): a batch
    that commits as much a step rules acceptance out; one whose slowdown is mostly fewer tokens
    a step rules the step's cost (graphs, host work) out."""
    out: Excluded = {}
    if why := _graph_mode(f):
        out[C.graph_mode] = why
    split = _batch_split(f)
    if f.speculation.off:
        out[C.acceptance_concurrency] = "speculation is off: a step commits one token at any batch"
    elif split is not None and split[1] >= 1 - COMMIT_HOLDS:
        out[C.acceptance_concurrency] = f"commit length holds with concurrency ({split[0]})"
    if split is not None and split[2] > ACCEPTANCE_SHARE:
        why = (
            f"the slowdown is in the tokens a step commits ({split[2]:.0%} of it: {split[0]}), "
            "not in what a step costs"
        )
        out.setdefault(C.graph_mode, why)
        out[C.host_per_token] = why
    elif "step_time_drift" not in found:
        out[C.host_per_token] = (
            "step time does not drift along the generation: no host work that grows with the "
            "output, which every request of a batch would add to the step"
        )
    return out


def _no_evidence(f: Facts, _: Mapping[str, Finding], __: str) -> Excluded:
    """No measurement of the run rules any of the card's causes out (yet)."""
    return {}


RULERS: Mapping[str, Callable[[Facts, Mapping[str, Finding], str], Excluded]] = {
    "chunk_coalescing": _coalescing,
    "acceptance_decay": _decay,
    "draft_window": _window,
    "speculation_overhead": _overhead,
    "acceptance_low": _acceptance_low,
    "step_time_drift": _drift,
    "context_scaling": _context_scaling,
    "two_point_bias": _two_point,
    "prefill_bound": _no_evidence,
    "batching_interference": _batching,
    "draft_coverage": _no_evidence,
    "client_limited": _no_evidence,
}


def _host_side_unstated_kv(finding: Finding, candidates: list[Cause], f: Facts) -> str | None:
    """The next step of a drift whose separating experiment already ran and pointed to the host
    side, with only the KV layout left beside host work (the server does not state its pages):
    not the experiment again, but the two checks that are left."""
    sep = f.drift_separation
    if finding.id != "step_time_drift" or set(candidates) != {C.host_per_token, C.kv_layout}:
        return None
    if sep is None or sep.share is None or sep.share > HOST_SHARE:
        return None
    near = (
        "near fresh requests of the generation's own prompt"
        if sep.base_s is not None
        else "near the generation's first steps"
    )
    page = (f.measured.run.info.server_info or {}).get("page_size")
    kv = (
        f"the server's KV pages of {page} token(s) can scatter as decode allocates them one by "
        f"one, which a fresh prompt (allocated at once) would not show: rerun with pages of "
        f"{MIN_CONTIGUOUS_PAGE} tokens or more"
        if isinstance(page, int)
        else "the server does not state its KV layout: check it first (pages of "
        f"{MIN_CONTIGUOUS_PAGE} tokens or more, allocated contiguously, rule it out)"
    )
    return (
        f"the fresh request at the reached context stepped {near} "
        f"({sep.share:.0%} of the growth came back), so the extra time goes with the output "
        f"generated; {kv}; if it stays, look for host work that re-reads the whole output "
        "every step (full re-detokenization, stop strings scanned over the whole text)"
    )


def _drift_between(finding: Finding, f: Facts) -> str | None:
    """The next step of a drift whose separating experiment ran and read between the two sides
    (neither ruled out): what it read, and more fresh requests (each one another reading; the
    fastest decides), not the same experiment named as if it had not run."""
    sep = f.drift_separation
    if finding.id != "step_time_drift" or sep is None or sep.share is None:
        return None
    if not HOST_SHARE < sep.share < DEVICE_SHARE:
        return None
    return (
        f"the fresh request(s) at the reached context ({sep.fresh_requests}, "
        f"{sep.fresh_prompt}-token prompt) showed {sep.share:.0%} of the generation's growth "
        f"({_ms(sep.early_s)} -> {_ms(sep.late_s)}; fresh {_ms(sep.fresh_s)}): between host "
        f"work per output token (below {HOST_SHARE:.0%}) and cost that comes with the context "
        f"(above {DEVICE_SHARE:.0%}); a burst of load during the fresh requests reads so too: "
        "run the diagnosis again with --repeat 3 (three fresh requests, the fastest decides) at "
        "a quiet moment; "
        f"{finding.next}"
    )


def _next(finding: Finding, cause: Cause | None, candidates: list[Cause], f: Facts) -> str:
    """The next step for the cause found; without one, the experiment that separates the
    candidates left (the card's, unless it already ran), then the finding's own advice."""
    flavor = f.flavor
    if cause is not None and "not the window" in finding.summary:
        return finding.next  # the rule's own advice for a cliff the stated window does not explain
    if cause is not None:
        return advice.for_cause(cause, flavor) or finding.next
    if (checks := _host_side_unstated_kv(finding, candidates, f)) is not None:
        return checks
    if (between := _drift_between(finding, f)) is not None:
        return between
    if len(candidates) > 1:
        names = ", ".join(c.value for c in candidates)
        separating = BY_ID[finding.id].separating([c.value for c in candidates])
        return f"to tell {names} apart: {separating}; {finding.next}"
    return finding.next


def assign(findings: list[Finding], f: Facts, tests: list[FindingTest]) -> list[Finding]:
    """Each finding with `cause`, `candidates` and `ruled_out` set (and `next` for its cause)."""
    found = {x.id: x for x in findings}
    methods = {t.id: t.method for t in tests}
    # the effects first, their consequences (two_point_bias) after: they inherit exclusions
    for finding in sorted(findings, key=lambda x: x.id == "two_point_bias"):
        excluded = RULERS[finding.id](f, found, methods.get(finding.id, ""))
        card = BY_ID[finding.id]
        candidates = [c for c in card.causes if c not in excluded]
        cause = candidates[0] if len(candidates) == 1 else None
        decided = finding.model_copy(
            update={
                "cause": cause.value if cause else None,
                "candidates": [c.value for c in candidates],
                "ruled_out": [
                    RuledOut(id=c.value, reason=why)
                    for c, why in excluded.items()
                    if c in card.causes
                ],
                "next": _next(finding, cause, candidates, f),
            }
        )
        found[finding.id] = decided
    return [found[x.id] for x in findings]
