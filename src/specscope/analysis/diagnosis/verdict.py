"""The verdict: the diagnosis in a few short sentences, in the story's terms, read first.

Why: a reader who asked "why is my tokens/s what it is" should not have to assemble the answer
from a panel of figures and a ranked list of tested claims. The story (shared/seed/) answers in
one chain: the rate, its split into tokens per step and step time, which of the two moved against
what it should be (the baseline, the two-point window, or a fresh context) and by how much, the
mechanism behind it, and the one thing to do next. The verdict says that chain, and says first
whatever changes how its numbers read (a partial run, speculation off, repetition loops, a client
and server that disagree, a stream slower than the engine's steps). Without a finding it says, in
words, that nothing is wrong.

Pure: reads the Analysis, the reference the run is measured against and the headline's
disagreements; no I/O. `diagnose.analyze` stores the sentences as `Analysis.verdict`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specscope.analysis.diagnosis.cards import BY_ID, MECHANISM, Cause
from specscope.analysis.diagnosis.facts import HONEYMOON_DEFAULT_WINDOW, Facts
from specscope.analysis.diagnosis.findings import COST_LABEL, INTERVAL_INCLUDES_ZERO, is_expected
from specscope.analysis.headline.measure import NO_WINDOW
from specscope.analysis.result import Analysis, Finding, FindingTest

MIN_REFERENCE_STEPS = 8  # steps a reference window needs before its means say anything

PARTIAL = "Partial run: the numbers cover only what was measured before it stopped."


@dataclass(frozen=True)
class Reference:
    """What the run's two factors are measured against, with its own tokens per step and step
    time: the baseline run, the two-point window (short requests on a fresh context), or the
    generation's own first tokens (a fresh context)."""

    name: str
    commit_len: float
    step_s: float


def reference(f: Facts) -> Reference | None:
    """The reference of the story, first that applies: the baseline run (the user's "it was
    faster before"), the two-point window (the measurement that looked healthy), the main
    generation's first tokens (what a fresh context gives). None without enough steps."""
    base = f.baseline.decomposition if f.baseline is not None else None
    if base is not None and base.mean_commit_len and base.mean_step_s:
        return Reference("the baseline", base.mean_commit_len, base.mean_step_s)
    tp, win = f.two_point.estimate, f.two_point.window
    if tp is not None and win is not None and win.n >= MIN_REFERENCE_STEPS:
        prompt = f" after a {tp.prompt_tokens}-token prompt" if tp.prompt_tokens else ""
        name = f"the two-point window (tokens {tp.n1}–{tp.n2}{prompt})"
        return _means(name, win.commit, win.step_s)
    mt = f.main_table
    if mt is None or not mt.n:
        return None
    first = mt.pos < mt.pos.min() + HONEYMOON_DEFAULT_WINDOW
    if first.sum() < MIN_REFERENCE_STEPS or first.all():
        return None
    name = f"its first {HONEYMOON_DEFAULT_WINDOW} tokens (a fresh context)"
    return _means(name, mt.commit[first], mt.step_s[first])


def _means(name: str, commit: np.ndarray, step_s: np.ndarray) -> Reference | None:
    """The reference over these steps; None when they carry no time."""
    L, s = float(np.mean(commit)), float(np.mean(step_s))
    return Reference(name, L, s) if L > 0 and s > 0 else None


def verdict(
    a: Analysis, ref: Reference | None = None, disagreements: Sequence[str] = ()
) -> list[str]:
    """The verdict's sentences, in reading order: what qualifies the numbers, the rate and its
    split, what moved against the reference, what changes the reading, the top cause and the
    next step (or that nothing is wrong)."""
    out = [PARTIAL] if a.partial else []
    if a.decode_tps is None:
        no_window = next((n for n in a.notes if n.startswith(NO_WINDOW)), None)
        why = a.no_finding_reason or no_window or "no request streamed tokens for a decode rate"
        return [*out, f"Nothing to diagnose: {_clause(why)}."]
    out.append(_rate(a))
    if (moved := _moved(a, ref)) is not None:
        out.append(moved)
    out += _readings(a, disagreements)
    if not a.findings:
        out += _healthy(a)
    elif all(is_expected(f) for f in a.findings):
        out += _healthy_as_expected(a)
    else:
        out += _cause_and_next(a)
    return out


def with_partial(sentences: list[str], partial: bool) -> list[str]:
    """The sentences with the partial-run warning first exactly when the run is partial: a
    run's status can be closed (or read) after its analysis was made."""
    rest = [s for s in sentences if s != PARTIAL]
    return [PARTIAL, *rest] if partial else rest


def times(x: float) -> str:
    """A multiple as the verdict writes it: 2.41×."""
    return f"{x:.2f}×"


def ms(seconds: float) -> str:
    """A step time in ms with three significant figures (1.44 ms, 31.2 ms, 156 ms)."""
    v = seconds * 1e3
    return f"{v:.0f} ms" if v >= 100 else f"{v:.1f} ms" if v >= 10 else f"{v:.2f} ms"


def _rate(a: Analysis) -> str:
    """The rate and its split into tokens per step and step time."""
    tps = f"Decode runs at {a.decode_tps:.1f} tokens/s"
    if a.mean_commit_len and a.mean_step_s:
        return f"{tps} = {a.mean_commit_len:.2f} tokens per step / {ms(a.mean_step_s)} per step."
    return f"{tps}; its split into tokens per step and step time is unknown."


def _multiple(x: float, worse: str, better: str) -> str:
    """A factor (> 1: worse) as a multiple with its direction in words."""
    return f"{times(x)} {worse}" if x >= 1 else f"{times(1 / x)} {better}"


def _moved(a: Analysis, ref: Reference | None) -> str | None:
    """What moved against the reference, as two multiples: tokens per step and step time
    (the baseline's exact split when there is one)."""
    at = a.attribution
    if at is not None and at.acceptance_factor and at.step_time_factor and at.tps_ratio:
        acc, step, ratio = at.acceptance_factor, at.step_time_factor, at.tps_ratio
        against = "Against the baseline"
    elif ref is not None and a.mean_commit_len and a.mean_step_s:
        acc, step = ref.commit_len / a.mean_commit_len, a.mean_step_s / ref.step_s
        ratio = acc * step
        against = (
            f"Against {ref.name}, {ref.commit_len:.2f} tokens per step in {ms(ref.step_s)} steps"
        )
    else:
        return None
    return (
        f"{against}: {_multiple(ratio, 'slower', 'faster')} = "
        f"{_multiple(acc, 'fewer tokens per step', 'more tokens per step')} × "
        f"{_multiple(step, 'longer steps', 'shorter steps')}."
    )


def _readings(a: Analysis, disagreements: Sequence[str]) -> list[str]:
    """What changes how the numbers read: speculation off or unknown, repetition loops that
    dominate the commit length, a client and server that disagree on it."""
    out = []
    if a.speculation == "off":
        out.append(f"{_off(a.speculation_reason)}, so the rate is the step time alone.")
    elif a.speculation == "unknown":
        out.append(
            f"Whether the server drafts is unknown ({_clause(a.speculation_reason)}): no "
            "drafter finding was tested."
        )
    loops = a.headline_loops or {}
    # loops are easy to draft: they change the reading only where the server drafts
    if a.speculation != "off" and loops.get("dominant") and loops.get("note"):
        out.append(f"Repetition loops: {_clause(loops['note'])}.")
    if disagreements:
        out.append(f"Client and server disagree: {_clause(disagreements[0])}.")
    if (lag := a.delivery_lag_share) is not None and lag >= DELIVERY_VERDICT_SHARE:
        out.append(_delivery(a, lag))
    return out


# A stream this much slower than the engine's own steps changes what the step time is (the
# smallest step-time effect a finding reports: ten percent moves tps by ten percent).
DELIVERY_VERDICT_SHARE = 0.10


def _delivery(a: Analysis, lag: float) -> str:
    """The stream's lag behind the engine as a reading of the step time: the delivered steps,
    not the engine's (headline.server_step_s)."""
    engine = f" ({ms(a.server_step_s)} a step at the engine)" if a.server_step_s else ""
    return (
        f"Delivery is the limit: the stream delivered steps {lag:.0%} slower than the engine "
        f"ran them{engine}, so the step time here is the server's front end's (output "
        "processing, detokenization, streaming) or this client's, not the engine's."
    )


def _off(reason: str | None) -> str:
    """The speculation-off reason as a sentence opening ("Speculation is off (...)")."""
    why = _clause(reason)
    if why.lower().startswith("speculation"):
        return why[0].upper() + why[1:]
    return f"Speculation is off ({why})" if why else "Speculation is off"


def _clause(text: str | None) -> str:
    """Text set inside a sentence: no trailing full stop of its own."""
    return (text or "").strip().rstrip(".")


def factor_of(f: Finding) -> tuple[str, float] | None:
    """("factor", x) for a finding with a factor, else ("cost", x): how much faster the run
    would be without the effect; None when neither was measured."""
    if f.factor is not None:
        return "factor", f.factor
    cost = next((e.value for e in f.evidence if e.label == COST_LABEL), None)
    return ("cost", float(cost)) if isinstance(cost, int | float) else None


def _cause_and_next(a: Analysis) -> list[str]:
    """The top finding's cause with its mechanism (or the causes still open) and the one next
    step: the cause's fix, or the experiment that separates the causes left."""
    top = a.findings[0]
    size = factor_of(top)
    seen = f"{top.id}, {size[0]} {times(size[1])}" if size else top.id
    if top.cause is not None:
        mechanism = MECHANISM.get(Cause(top.cause), top.cause)
        cause = f"Top cause: {top.cause}, {mechanism}; it shows as {seen}."
    elif len(top.candidates) > 1:
        cause = (
            f"Top finding: {BY_ID[top.id].claim} ({seen}); its cause is "
            f"{' or '.join(top.candidates)}, not yet told apart."
        )
    else:
        cause = f"Top finding: {BY_ID[top.id].claim} ({seen})."
    return [cause, f"Next: {next_step(top)}."]


def next_step(f: Finding) -> str:
    """A finding's one next step: with its cause open between several, the experiment that
    tells them apart (the card's), unless the diagnosis has a better one (the experiment ran
    and left checks: causes._next); else its own advice (the cause's fix where one is named)."""
    separating = (f.next or "").startswith("to tell ")
    if f.cause is None and len(f.candidates) > 1 and separating:
        separating = BY_ID[f.id].separating(f.candidates)
        return f"to tell {' and '.join(f.candidates)} apart, {_clause(separating)}"
    return _clause(f.next) or "nothing the run can name"


def _healthy_as_expected(a: Analysis) -> list[str]:
    """Only what a healthy server does was found (attention cost growing with the context):
    nothing wrong, said as such, with the fault it could still hide and how to rule it out;
    or, where another effect that would matter was left undecided, that it is not ruled out
    (as `_healthy` says it)."""
    top = a.findings[0]
    size = factor_of(top)
    seen = f"{top.id}, {size[0]} {times(size[1])}" if size else top.id
    undecided = not_ruled_out(a)
    if undecided is not None:
        return [
            f"What was found is how a healthy server behaves, {BY_ID[top.id].claim} ({seen}).",
            *_undecided_lines(undecided),
        ]
    expected = BY_ID[top.id].expected
    others = [c for c in top.candidates if c != expected] if top.cause is None else []
    untold = (
        f"; {' or '.join(others)} would look the same, and "
        f"{_clause(BY_ID[top.id].separating(top.candidates))} "
        "tells them apart"
        if others
        else ""
    )
    return [
        f"Nothing wrong: what was found is how a healthy server behaves, "
        f"{BY_ID[top.id].claim} ({seen}).",
        "Next: nothing to fix; keep this run as the baseline and diagnose the next change "
        f"with --baseline{untold}.",
    ]


def not_ruled_out(a: Analysis) -> FindingTest | None:
    """The tested effect that was measured as large as matters but left undecided (its interval
    reaches zero): the largest such, else None. "Nothing wrong" would then overstate the run:
    on a loaded 2-core machine the engine's seeded host work read +125% drift of the mean
    step, 95% CI -195%..+445% (the load's slow phases), and the verdict said nothing was wrong."""
    open_ = [
        t
        for t in a.finding_tests
        if t.outcome == INTERVAL_INCLUDES_ZERO
        and t.min_effect > 0
        and t.effect is not None
        and t.effect >= t.min_effect
    ]
    return max(open_, key=lambda t: (t.effect or 0.0) / t.min_effect, default=None)


def _percent(x: float | None) -> str:
    return "?" if x is None else f"{x:+.0%}"


def _undecided_lines(t: FindingTest) -> list[str]:
    """One undecided test in words (the claim, what it read with its interval, why it is open)
    and the next step that decides it."""
    of = t.unit.removeprefix("fraction") if t.unit.startswith("fraction of") else ""
    return [
        f"Nothing shown wrong, but not ruled out: {t.id} ({BY_ID[t.id].claim}) read "
        f"{_percent(t.effect)}{of} (95% CI {_percent(t.ci[0])}..{_percent(t.ci[1])}), as large "
        f"as the {t.min_effect:.0%} that matters, with an interval too wide to decide.",
        "Next: measure again with more repeats of the full generation (--precision 0.05) "
        f"or on a quieter machine, to decide {t.id}.",
    ]


def _healthy(a: Analysis) -> list[str]:
    """No finding: nothing wrong, in words, and what to keep; or, where an effect that would
    matter was measured but left undecided, that it is not ruled out and how to decide it."""
    tested = len(a.finding_tests)
    if not tested:
        why = _clause(a.no_finding_reason) or "no claim could be tested on this run"
        return [f"Nothing found wrong, but nothing could be tested either: {why}."]
    undecided = not_ruled_out(a)
    if undecided is not None:
        return _undecided_lines(undecided)
    return [
        f"Nothing wrong: none of the {tested} effects tested is both real and large enough to "
        "matter.",
        "Next: nothing to fix; keep this run as the baseline and diagnose the next change "
        "with --baseline.",
    ]
