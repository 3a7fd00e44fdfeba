"""What every renderer needs: the analysis plus the facts about the run that are not in it
(endpoint, model, status, plan, request errors). Built once, rendered three ways."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from specscope.analysis.diagnosis.breakeven import NO_POLICY
from specscope.analysis.diagnosis.findings import COST_LABEL, TEST_SOURCE
from specscope.analysis.diagnosis.verdict import PARTIAL, factor_of, ms, next_step, times
from specscope.analysis.headline.uncertainty import MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP
from specscope.analysis.result import Analysis, Evidence, Finding, FindingTest
from specscope.trace import RequestTrace, Run, RunInfo


@dataclass
class RequestError:
    index: int
    tag: str
    kind: str
    message: str


@dataclass
class ReportContext:
    analysis: Analysis
    info: RunInfo
    run_dir: str = ""
    errors: list[RequestError] = field(default_factory=list)
    plan: dict[str, Any] | None = None

    @property
    def partial(self) -> bool:
        return self.analysis.partial or self.info.status in ("partial", "failed")

    @property
    def status_line(self) -> str:
        if self.info.status == "complete" and not self.analysis.partial:
            return "complete"
        reason = self.info.status_reason or "stopped before the plan finished"
        return f"{self.info.status if self.info.status != 'running' else 'partial'}: {reason}"


class ProbeResult(Protocol):
    """What a probe's report renders (`entrypoints.probe.ProbeOutcome` is one): the run dir, what
    was detected, every trace, the summary, the serving figures and the precision record."""

    run_dir: Path
    info: RunInfo
    traces: list[RequestTrace]
    summary: dict[str, Any]
    detection: str
    notes: list[str]
    serving: dict[str, Any] | None
    precision: dict[str, Any] | None


def context_from_run(run: Run, analysis: Analysis, run_dir: str = "") -> ReportContext:
    errors = [
        RequestError(r.index, r.spec.tag, r.error.kind, r.error.message)
        for r in run.requests
        if r.error is not None
    ]
    plan = run.info.args.get("plan") if isinstance(run.info.args, dict) else None
    return ReportContext(
        analysis=analysis,
        info=run.info,
        run_dir=run_dir or analysis.run_dir or "",
        errors=errors,
        plan=plan if isinstance(plan, dict) else None,
    )


def fmt(value: float | int | None, digits: int = 2, unit: str = "") -> str:
    """A number for people: '-' when unknown, otherwise rounded with its unit."""
    if value is None:
        return "-"
    text = f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip()


def fmt_ci(
    ci: list[float] | tuple[float, float] | None,
    digits: int = 2,
    scale: float = 1.0,
    unit: str = "",
) -> str:
    """' (95% CI lo–hi unit)' for an interval, '' without one."""
    if not ci or len(ci) != 2 or ci[0] is None or ci[1] is None:
        return ""
    lo, hi = ci[0] * scale, ci[1] * scale
    return f" (95% CI {lo:.{digits}f}–{hi:.{digits}f}{' ' + unit if unit else ''})"


def fmt_interval(iv: object, digits: int = 3) -> str:
    """An attribution Interval (value, low, high) as its 95% CI suffix, '' without bounds."""
    low, high = getattr(iv, "low", None), getattr(iv, "high", None)
    return fmt_ci([low, high], digits) if low is not None and high is not None else ""


def drafted_line(a: Analysis) -> str | None:
    """The server's drafted-steps-only commit length, labelled, or None when there is none."""
    if a.mean_commit_len_per_drafted_step is None:
        return None
    share = (
        f"; {a.drafted_step_share:.0%} of steps drafted" if a.drafted_step_share is not None else ""
    )
    return (
        f"{a.mean_commit_len_per_drafted_step:.2f} tokens per drafted step (the server's "
        f"figure, steps that drafted nothing left out{share})"
    )


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f} ms"


def fmt_value(value: object) -> str:
    """An evidence value: floats to 4 significant digits (6.006e-05, 32.38), the rest as is."""
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _open_ci(ci: list[float | None] | None, unit: str = "") -> str:
    """A breakeven interval, whose ends may be open (null: beyond the searched range)."""
    if not ci:
        return ""
    lo = "…" if ci[0] is None else f"{ci[0]:.1f}"
    hi = "…" if ci[1] is None else f"{ci[1]:.1f}"
    return f" (95% CI {lo}–{hi}{unit})"


def _swept(be: dict[str, Any], axis: str) -> bool:
    """Whether the runs measured a range along `axis` (a sweep): a breakeven without one has
    no data behind it."""
    lo, hi = (be.get(f"{axis}_range") or [None, None])[:2]
    return lo is not None and hi is not None and hi > lo


def breakeven_lines(
    be: dict[str, Any] | None, with_unmeasured: bool = False
) -> list[tuple[str, str]]:
    """(label, text) rows of the breakeven against the baseline; [] without one. An axis no
    sweep measured, and a recommendation that has no sweep to stand on, are left out unless
    `with_unmeasured` (--verbose: the row says which sweep would give it)."""
    if not be:
        return []
    rows: list[tuple[str, str]] = []
    for axis, unit in (("concurrency", ""), ("context", " tokens")):
        point = be.get(axis)
        if point is not None:
            rows.append(
                (f"breakeven {axis}", f"{point:.1f}{unit}" + _open_ci(be.get(f"{axis}_ci"), unit))
            )
        elif (be.get(f"{axis}_reason") or be.get("reason")) and (
            with_unmeasured or _swept(be, axis)
        ):
            rows.append((f"breakeven {axis}", str(be.get(f"{axis}_reason") or be.get("reason"))))
    factors = [f for f in be.get("factors") or [] if isinstance(f, dict)]
    if factors:
        rows.append(
            (
                "loss factors",
                "; ".join(
                    f"{f.get('name')} ×{f.get('factor', 0):.2f}"
                    + (f" ({f['share_of_loss']:.0%})" if f.get("share_of_loss") is not None else "")
                    for f in factors
                ),
            )
        )
    rec = be.get("recommendation")
    if rec and (with_unmeasured or rec != NO_POLICY):
        rows.append(("recommendation", str(rec)))
    return rows


_STOPPED_BY = {
    "precision": "stopped: precision reached",
    "budget": "stopped by the budget",
    "max_requests": "stopped at the request cap",
    "no_data": "stopped: no request with a decode window",
    "errors": "stopped by errors",
    "interrupted": "stopped by Ctrl-C",
    "off": "--precision 0: the plan's requests only",
}


def precision_line(p: dict[str, Any] | None, method: bool = True) -> str | None:
    """What the --precision repeats reached, against what they aimed for and why they stopped
    (`method`: and what the interval leaves out); None for a run without a precision
    target."""
    if not p:
        return None
    reached = p.get("reached")
    got = "no interval" if reached is None else f"±{reached:.1%}"
    text = f"decode tps known to {got} over {p.get('requests', 0)} request(s)"
    if p.get("target"):
        text += f" (target ±{p['target']:.1%})"
    text += f"; {_STOPPED_BY.get(str(p.get('stopped_by')), str(p.get('stopped_by')))}"
    if p.get("stopped_by") in ("budget", "max_requests") and p.get("needed"):
        text += f" ({p['needed']} requests needed)"
    if p.get("added_requests"):
        text += f"; {p['added_requests']} repeat(s) added"
        if p.get("spent_s") is not None:
            text += f" in {p['spent_s']:.0f} s"
    if method and reached is not None and not p.get("over_requests"):
        text += (
            "; the interval is over blocks of steps, so it leaves out how much the rate "
            "moves from one prompt to the next "
            f"({MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP}+ requests resample requests)"
        )
    return text


def plan_precision_line(pp: dict[str, Any]) -> str:
    """What the plan's precision repeats will do (a plan's `precision`, as recorded)."""
    start, tag = pp.get("start_requests", 1), pp.get("tag", "the full generation")
    if not pp.get("target"):
        return f"precision: off (--precision 0): {start} {tag} request(s), no repeats"
    limits = []
    if pp.get("deadline_s") is not None:
        limits.append(f"what is left of --quick's {pp['deadline_s']:.0f} s")
    elif pp.get("budget_s") is not None:
        limits.append(f"{pp['budget_s']:.0f} s")
    if pp.get("budget_tokens") is not None:
        limits.append(f"{pp['budget_tokens']} generated tokens")
    budget = " or ".join(limits) if limits else "no time or token limit"
    return (
        f"precision: then more {tag} requests (from {start}) until decode tps' 95% interval "
        f"over requests ({MIN_REQUESTS_FOR_REQUEST_BOOTSTRAP} or more) is within ±{pp['target']:.1%}, or the budget "
        f"({budget}, at most {pp.get('max_requests')} requests) is spent"
    )


# --- the folded view: the verdict first, each finding by the few numbers that carry it --------

FOLDED_HINT = "--verbose, --json, report.html"


def verdict_lines(a: Analysis) -> list[str]:
    """The verdict's sentences without the partial-run warning: each renderer states that its
    own way, with the run's status (ReportContext.status_line)."""
    return [s for s in a.verdict if s != PARTIAL]


def is_test_evidence(e: Evidence) -> bool:
    """An evidence line that restates the finding's test (method, effect, interval, p, q):
    folded away from the default view."""
    return e.source == TEST_SOURCE


def test_of(a: Analysis, finding_id: str) -> FindingTest | None:
    """The test that decided this finding (None for a validity check decided by counting)."""
    return next((t for t in a.finding_tests if t.id == finding_id), None)


def folded_next(f: Finding) -> str:
    """The finding's one next step as the folded view shows it (verdict.next_step): with its
    cause open, the experiment that separates the causes; `--verbose` shows all its advice."""
    return next_step(f)


def finding_heading(f: Finding) -> str:
    """What follows a finding's id: its factor (or cost) as a multiple and its cause, or the
    causes still open."""
    parts = []
    if (size := factor_of(f)) is not None:
        parts.append(f"{size[0]} {times(size[1])}")
    if f.cause:
        parts.append(f"cause {f.cause}")
    elif f.candidates:
        parts.append(f"cause undecided: {' or '.join(f.candidates)}")
    return " · ".join(parts)


def finding_numbers(f: Finding, test: FindingTest | None) -> list[str]:
    """The numbers that carry a finding beside its factor (finding_heading), three in all, in
    human units with their intervals: the tested effect, then the first measured figures of
    its evidence (two where there is no factor)."""
    out = [f"effect {_effect(test)}"] if test is not None and test.effect is not None else []
    values = {e.label: e.value for e in f.evidence}
    limit = len(out) + (1 if factor_of(f) is not None else 2)
    for e in f.evidence:
        if len(out) >= limit:
            break
        text = _figure(e, values)
        if text is not None:
            out.append(f"{e.label} {text}")
    return out


_PERCENT_UNITS = ("", "fraction", "fraction of the mean step", "share of steps")


def _effect(t: FindingTest) -> str:
    """A test's effect with its 95% interval, in the unit a reader thinks in: a multiple for
    ratios (effect = ratio - 1), a percentage for shares and fractions."""
    lo, hi = t.ci if len(t.ci) == 2 else (None, None)
    effect = t.effect or 0.0
    if t.unit == "x":
        ci = f" (95% CI {1 + lo:.2f}–{times(1 + hi)})" if lo is not None and hi is not None else ""
        return times(1 + effect) + ci
    shift = 0.5 if t.unit == "share above 0.5" else 0.0  # the share itself, not its excess
    ci = (
        f" (95% CI {lo + shift:.0%} to {hi + shift:.0%})"
        if lo is not None and hi is not None
        else ""
    )
    return f"{effect + shift:.0%}" + ci


# evidence units shown in the folded view, each to human units: (scale, format, unit shown)
_HUMAN = {
    "s/token": (1e6, "{:.2f}", " ms per 1000 tokens"),
    "tokens/step": (1.0, "{:.2f}", " tokens/step"),
    "tok/s": (1.0, "{:.1f}", " tok/s"),
    "tokens": (1.0, "{:.0f}", " tokens"),
}


def _figure(e: Evidence, values: dict[str, object]) -> str | None:
    """One measured figure of a finding in human units with its interval when the evidence
    has one (`<label> 95% CI low/high`); None for what the folded view leaves out (the test's
    lines, the cost, the interval ends themselves, text and counts)."""
    if is_test_evidence(e) or e.label == COST_LABEL or " 95% CI " in e.label:
        return None
    if isinstance(e.value, bool) or not isinstance(e.value, int | float):
        return None
    lo, hi = values.get(f"{e.label} 95% CI low"), values.get(f"{e.label} 95% CI high")
    has_ci = isinstance(lo, int | float) and isinstance(hi, int | float)
    if e.unit == "s":
        return _seconds(e.value) + (f" (95% CI {_seconds(lo)} to {_seconds(hi)})" if has_ci else "")
    if e.unit == "x":
        return times(e.value)
    if e.unit not in _HUMAN:
        return None
    scale, form, unit = _HUMAN[e.unit]
    text = form.format(e.value * scale) + unit
    if has_ci:
        text += f" (95% CI {form.format(lo * scale)}–{form.format(hi * scale)})"
    return text


def _seconds(v: float) -> str:
    """A time in ms below a second (step times, TTFT), in seconds above."""
    return ms(v) if abs(v) < 1 else f"{v:.2f} s"
