"""What every renderer needs: the analysis plus the facts about the run that are not in it
(endpoint, model, status, plan, request errors). Built once, rendered three ways."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specscope.analysis.model import Analysis
from specscope.trace import Run, RunInfo


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


def context_from_run(run: Run, analysis: Analysis, run_dir: str = "") -> ReportContext:
    errors = [
        RequestError(r.index, r.spec.tag, r.error.kind, r.error.message)
        for r in run.requests
        if r.error is not None
    ]
    plan = run.info.args.get("plan") if isinstance(run.info.args, dict) else None
    return ReportContext(analysis=analysis, info=run.info, run_dir=run_dir or analysis.run_dir or "",
                         errors=errors, plan=plan if isinstance(plan, dict) else None)


def fmt(value: float | int | None, digits: int = 2, unit: str = "") -> str:
    """A number for people: '-' when unknown, otherwise rounded with its unit."""
    if value is None:
        return "-"
    text = f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip()


def fmt_ci(ci: list[float] | tuple[float, float] | None, digits: int = 2, scale: float = 1.0,
           unit: str = "") -> str:
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
    share = (f"; {a.drafted_step_share:.0%} of steps drafted"
             if a.drafted_step_share is not None else "")
    return (f"{a.mean_commit_len_per_drafted_step:.2f} tokens per drafted step (the server's "
            f"figure, steps that drafted nothing left out{share})")


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


def breakeven_lines(be: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(label, text) rows of the breakeven against the baseline; [] without one."""
    if not be:
        return []
    rows: list[tuple[str, str]] = []
    for axis, unit in (("concurrency", ""), ("context", " tokens")):
        point = be.get(axis)
        if point is not None:
            rows.append((f"breakeven {axis}", f"{point:.1f}{unit}"
                         + _open_ci(be.get(f"{axis}_ci"), unit)))
        elif be.get(f"{axis}_reason") or be.get("reason"):
            rows.append((f"breakeven {axis}", str(be.get(f"{axis}_reason") or be.get("reason"))))
    factors = [f for f in be.get("factors") or [] if isinstance(f, dict)]
    if factors:
        rows.append(("loss factors", "; ".join(
            f"{f.get('name')} ×{f.get('factor', 0):.2f}"
            + (f" ({f['share_of_loss']:.0%})" if f.get("share_of_loss") is not None else "")
            for f in factors)))
    if be.get("recommendation"):
        rows.append(("recommendation", str(be["recommendation"])))
    return rows
