"""Commit length: its histogram (the story's `uniq -c` table), its mean, and its shape.

Commit length (accepted drafts + the bonus token) has two shapes that matter (ARCHITECTURE §1):
- *decay* with output position: early tokens are easy (the "honeymoon"), so a short window
  overstates the long-generation mean;
- a *window cliff*: once the context exceeds the drafter's window W, the drafter loses context
  and acceptance drops.
Within one generation both are functions of the same clock (context = prompt + position), so the
model search pools requests with different prompt lengths: a cliff happens at the same *context*
in every request, a decay at the same *output position*. Candidate models (none, decay, window,
both) are compared by BIC; a change-point is one extra parameter.

Server telemetry is merged here too: per-step records (DDTREE lines) are the ground truth of the
histogram when present; summaries (Decode batch accept len, vLLM intervals, Prometheus deltas,
llama.cpp timings) give a mean weighted by the steps they cover.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from specscope.analysis.fits.steptime import KTOK
from specscope.telemetry.commit import DRAFTED_STEPS, CommitTally, basis_of, is_step_record
from specscope.telemetry.records import SpecRecord

# A decay or a cliff is reported only when the chosen model has it AND its coefficient has
# |t| >= 4 (the change-point search inflates false positives; t >= 4 keeps the family-wise rate
# low over ~60 candidate cut points) AND it changes commit length by >= 10% (smaller changes are
# within content-to-content variation of real drafters).
EFFECT_T = 4.0
MIN_RELATIVE_EFFECT = 0.10
MIN_SIDE = 20  # steps on each side of a change point
# A window cliff must also show *across requests* among early steps (output position below
# EARLY_POS): requests that start above W commit less from their first tokens on. Within one
# generation a cliff and a decay are the same curve; only this cross-request contrast tells them
# apart, so an unconfirmed cliff is not reported (|t| >= CONFIRM_T, >= MIN_EARLY steps a side).
EARLY_POS = 128
CONFIRM_T = 3.0
MIN_EARLY = 10
COARSE_CUTS = 40
MAX_REFINE = 200


def histogram(commit_len: Iterable[float]) -> dict[int, int]:
    """commit length -> number of steps (sorted by commit length)."""
    c = Counter(round(k) for k in commit_len)
    return dict(sorted(c.items()))


def histogram_mean(hist: dict[int, int]) -> float | None:
    n = sum(hist.values())
    return sum(k * v for k, v in hist.items()) / n if n else None


@dataclass(frozen=True)
class ChangeEffect:
    kind: str  # "step" | "linear"
    at: float | None  # change point (output position for decay, context for the window)
    at_range: tuple[float, float] | None  # where the change point could be (data gaps)
    coef: float  # change in commit length (step) or per 1000 tokens (linear)
    t: float
    before: float  # mean commit length before the change (or at the start)
    after: float  # mean commit length after the change (or at the end of the span)

    @property
    def relative_drop(self) -> float:
        return 1 - self.after / self.before if self.before > 0 else 0.0


@dataclass
class AcceptanceFit:
    model: str  # "none" | "decay" | "window" | "both"
    bic: dict[str, float]
    decay: ChangeEffect | None = None
    window: ChangeEffect | None = None
    n: int = 0
    mean: float = 0.0
    separable: bool = True  # prompts vary: decay and window can be told apart
    notes: list[str] = field(default_factory=list)

    @property
    def decay_present(self) -> bool:
        d = self.decay
        return bool(d and d.t <= -EFFECT_T and d.relative_drop >= MIN_RELATIVE_EFFECT)

    @property
    def window_present(self) -> bool:
        w = self.window
        return bool(w and w.t <= -EFFECT_T and w.relative_drop >= MIN_RELATIVE_EFFECT)


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    rss = float(resid @ resid)
    dof = max(y.size - x.shape[1], 1)
    try:
        se = np.sqrt(np.clip(np.diag(rss / dof * np.linalg.inv(x.T @ x)), 0, None))
    except np.linalg.LinAlgError:
        se = np.full(x.shape[1], np.inf)
    return beta, rss, se


def _bic(rss: float, n: int, k: int) -> float:
    return n * np.log(max(rss, 1e-12) / n) + k * np.log(n)


def _cuts(values: np.ndarray) -> np.ndarray:
    """Candidate thresholds (cut = 'value > c') leaving >= MIN_SIDE steps on each side."""
    v = np.sort(values)
    if v.size < 2 * MIN_SIDE:
        return np.zeros(0)
    inner = v[MIN_SIDE - 1 : v.size - MIN_SIDE]
    qs = np.unique(np.quantile(inner, np.linspace(0, 1, COARSE_CUTS)))
    return qs


def _refine(values: np.ndarray, best: float, coarse: np.ndarray) -> np.ndarray:
    """All distinct values between the coarse neighbours of the best cut (bounded)."""
    i = int(np.searchsorted(coarse, best))
    lo = coarse[max(i - 1, 0)]
    hi = coarse[min(i + 1, coarse.size - 1)]
    u = np.unique(values[(values >= lo) & (values <= hi)])
    if u.size > MAX_REFINE:
        u = u[np.linspace(0, u.size - 1, MAX_REFINE).astype(int)]
    v = np.sort(values)
    lo_ok, hi_ok = v[MIN_SIDE - 1], v[v.size - MIN_SIDE - 1]
    return u[(u >= lo_ok) & (u <= hi_ok)]


def _best_step(
    y: np.ndarray, base: list[np.ndarray], values: np.ndarray
) -> tuple[float, float, tuple[float, float]] | None:
    """Best threshold c for an extra column [values > c] on top of `base`: (c, rss, range).

    `range` is where the change point could be: the span of every cut whose fit is within
    Delta-BIC 4 of the best (indistinguishable), widened to the data gaps around them. With
    gaps in the data (a sweep at 1024 and 2048) this is the honest answer: "between 1151 and
    2048", and its upper end is the first context seen with low acceptance."""
    coarse = _cuts(values)
    if coarse.size == 0:
        return None

    def rss_at(c: float) -> float:
        ind = (values > c).astype(float)
        if ind.min() == ind.max():
            return float("inf")
        return _ols(np.column_stack([*base, ind]), y)[1]

    scored = {float(c): rss_at(c) for c in coarse}
    best_c = min(scored, key=scored.get)
    for c in _refine(values, best_c, coarse):
        scored.setdefault(float(c), rss_at(c))
    best_c = min(scored, key=scored.get)
    best_rss = scored[best_c]
    tol = best_rss * (np.exp(4.0 / y.size) - 1)  # Delta-BIC 4 in RSS terms
    near = [c for c, r in scored.items() if r <= best_rss + tol]
    uniq = np.unique(values)
    lo_c, hi_c = min(near), max(near)
    for _ in range(MAX_REFINE):  # crawl outwards over data values while still indistinguishable
        j = int(np.searchsorted(uniq, hi_c, side="right"))
        if j >= uniq.size - 1 or rss_at(float(uniq[j])) > best_rss + tol:
            break
        hi_c = float(uniq[j])
    for _ in range(MAX_REFINE):
        j = int(np.searchsorted(uniq, lo_c, side="left")) - 1
        if j < 0 or rss_at(float(uniq[j])) > best_rss + tol:
            break
        lo_c = float(uniq[j])
    lo = _gap_range(values, lo_c)[0]
    hi = _gap_range(values, hi_c)[1]
    return best_c, best_rss, (lo, hi)


def _gap_range(values: np.ndarray, cut: float) -> tuple[float, float]:
    """Largest observed value <= cut and smallest above it: the change point lies between."""
    below = values[values <= cut]
    above = values[values > cut]
    return (float(below.max()) if below.size else cut, float(above.min()) if above.size else cut)


def _confirm_window(y: np.ndarray, ctx: np.ndarray, pos: np.ndarray, cut: float) -> float | None:
    """t of the cliff among early steps only, with output position as a covariate (so that a
    decay over the early positions, mixed differently on each side, is not read as a cliff).
    None when not a confirmed drop (too few early steps on a side, or t > -CONFIRM_T)."""
    early = pos < EARLY_POS
    above = early & (ctx > cut)
    below = early & (ctx <= cut)
    if above.sum() < MIN_EARLY or below.sum() < MIN_EARLY:
        return None
    ye = y[early]
    x = np.column_stack([np.ones(ye.size), pos[early] / KTOK, (ctx[early] > cut).astype(float)])
    beta, _, se = _ols(x, ye)
    t = float(beta[2] / se[2]) if se[2] > 0 else 0.0
    return t if t <= -CONFIRM_T else None


_Step = tuple[float, float, tuple[float, float]]  # _best_step's (cut, rss, range)
_Decay = tuple[str, float | None, float]  # (kind, cut or None, rss)


def _decay_choice(
    y: np.ndarray, pos: np.ndarray, ones: np.ndarray
) -> tuple[_Decay | None, _Step | None]:
    """The decay shape that fits better, a step at output position T or linear in it (and the
    step's own fit, whose range the effect reports)."""
    n = y.size
    decay_choice: _Decay | None = None
    step_t = _best_step(y, [ones], pos)
    if step_t:
        decay_choice = ("step", step_t[0], step_t[1])
    if np.std(pos) > 0:
        lin_rss = _ols(np.column_stack([ones, pos / KTOK]), y)[1]
        # the step has one more parameter (the cut); compare on the BIC scale
        if decay_choice is None or _bic(lin_rss, n, 2) <= _bic(decay_choice[2], n, 3):
            decay_choice = ("linear", None, lin_rss)
    return decay_choice, step_t


def _window_choice(
    y: np.ndarray,
    ctx: np.ndarray | None,
    pos: np.ndarray,
    ones: np.ndarray,
    bic_none: float,
    notes: list[str],
) -> tuple[_Step | None, bool]:
    """A cliff in context, kept only where requests starting at a longer context confirm it
    (else it is decay), and whether the prompts vary enough to tell the two apart."""
    n = y.size
    separable = True
    window_choice: _Step | None = None
    if ctx is not None and np.std(ctx) > 0:
        window_choice = _best_step(y, [ones], ctx)
        if window_choice and _confirm_window(y, ctx, pos, window_choice[0]) is None:
            window_choice = _early_cut(y, ctx, pos, ones) or _unconfirmed(
                window_choice, n, bic_none, notes
            )
        prompt = ctx - pos
        separable = float(np.ptp(prompt)) >= 64
        if not separable:
            notes.append(
                "one prompt length: a drop with context and a drop with output position look "
                "the same; a context sweep tells them apart"
            )
    return window_choice, separable


def _unconfirmed(choice: _Step, n: int, bic_none: float, notes: list[str]) -> None:
    """No window: the best cut over every step is not seen across requests (say so where it
    would have mattered)."""
    if _bic(choice[1], n, 3) < bic_none - 10:
        notes.append(
            "commit length changes with context inside a generation, but requests that "
            "start at a longer context do not confirm a window cliff, so it is tested as an "
            "output-position effect (decay) instead of a draft window"
        )


def _early_cut(y: np.ndarray, ctx: np.ndarray, pos: np.ndarray, ones: np.ndarray) -> _Step | None:
    """The cliff searched among early steps only (output position < EARLY_POS), where requests
    of different prompt lengths meet: the second look when the cut over every step is not
    confirmed.

    Why: inside long generations commit length moves for reasons of their own (the text stops
    copying the prompt, or starts repeating itself), and with most steps there the search over
    every step places its cut where those generations change, not where the context crosses a
    window; the sweep's short requests either side of the window are then outvoted. Among early
    steps the cut falls between prompt lengths. It is kept only where it is confirmed the same
    way (|t| >= CONFIRM_T, output position as a covariate); its fit over every step is what the
    model search compares, and its range is the gap between the early contexts around it."""
    early = pos < EARLY_POS
    if early.sum() < 2 * MIN_SIDE or np.ptp(ctx[early]) <= 0:
        return None
    found = _best_step(y[early], [ones[early], pos[early] / KTOK], ctx[early])
    if found is None or _confirm_window(y, ctx, pos, found[0]) is None:
        return None
    cut, _, rng = found
    rss = _ols(np.column_stack([ones, (ctx > cut).astype(float)]), y)[1]
    return cut, rss, rng


def _decay_column(decay_choice: _Decay | None, pos: np.ndarray) -> np.ndarray | None:
    """The decay's regressor, shared by the joint search and the final fit: output position
    (linear) or the indicator past the step."""
    if decay_choice is None:
        return None
    if decay_choice[0] == "linear":
        return pos / KTOK
    return (pos > decay_choice[1]).astype(float)


def _both_choice(
    y: np.ndarray, ctx: np.ndarray, pos: np.ndarray, ones: np.ndarray, decay: np.ndarray
) -> _Step | None:
    """The window cliff searched on top of the decay, so that both can be present at once;
    kept only where early steps confirm it."""
    both_choice = _best_step(y, [ones, decay], ctx)
    if both_choice and _confirm_window(y, ctx, pos, both_choice[0]) is None:
        both_choice = None
    return both_choice


def _fill_effects(
    fit: AcceptanceFit,
    y: np.ndarray,
    ctx: np.ndarray | None,
    pos: np.ndarray,
    ones: np.ndarray,
    choices: tuple[_Decay | None, _Step | None, _Step | None, _Step | None],
) -> None:
    """The chosen model's effects (size, before and after, OLS t-stat): what the findings
    test, from one joint regression so that each is net of the other."""
    decay_choice, step_t, window_choice, both_choice = choices
    model = fit.model
    cols = [ones]
    names = []
    if model in ("decay", "both"):
        cols.append(_decay_column(decay_choice, pos))
        names.append("decay")
    if model in ("window", "both"):
        w = window_choice[0] if model == "window" else both_choice[0]
        cols.append((ctx > w).astype(float))
        names.append("window")
    if len(cols) == 1:
        return
    beta, _, se = _ols(np.column_stack(cols), y)
    for j, name in enumerate(names, start=1):
        t = float(beta[j] / se[j]) if se[j] > 0 else 0.0
        if name == "decay":
            kind, at = decay_choice[0], decay_choice[1]
            if kind == "linear":
                before = float(beta[0])
                after = before + float(beta[j]) * float(pos.max()) / KTOK
                rng = None
            else:
                before, after = float(y[pos <= at].mean()), float(y[pos > at].mean())
                rng = step_t[2]
            fit.decay = ChangeEffect(kind, at, rng, float(beta[j]), t, before, after)
        else:
            w, _, (lo, hi) = window_choice if model == "window" else both_choice
            hi = max(hi, _gap_range(ctx, w)[1])
            before = float(y[ctx <= w].mean())
            # the cliff itself, net of any decay: before + the window coefficient
            after = before + float(beta[j])
            fit.window = ChangeEffect("step", hi, (lo, hi), float(beta[j]), t, before, after)


def fit_acceptance(
    commit_len: np.ndarray, context: np.ndarray | None, output_pos: np.ndarray
) -> AcceptanceFit | None:
    """Model search over none / decay (step or linear in output position) / window cliff (step in
    context) / both. Returns the chosen model with its effects (t-stats from OLS)."""
    y = np.asarray(commit_len, dtype=float)
    pos = np.asarray(output_pos, dtype=float)
    n = y.size
    if n < 2 * MIN_SIDE:
        return None
    ones = np.ones(n)
    ctx = np.asarray(context, dtype=float) if context is not None else None
    rss0 = float(np.sum((y - y.mean()) ** 2))
    bic = {"none": _bic(rss0, n, 1)}
    notes: list[str] = []

    # decay: a step at output position T, or linear in output position; take the better
    decay_choice, step_t = _decay_choice(y, pos, ones)
    if decay_choice:
        bic["decay"] = _bic(decay_choice[2], n, 2 if decay_choice[0] == "linear" else 3)

    window_choice, separable = _window_choice(y, ctx, pos, ones, bic["none"], notes)
    if window_choice:
        bic["window"] = _bic(window_choice[1], n, 3)

    both_choice: _Step | None = None
    if decay_choice and window_choice and separable:
        both_choice = _both_choice(y, ctx, pos, ones, _decay_column(decay_choice, pos))
        if both_choice:
            k = (2 if decay_choice[0] == "linear" else 3) + 2
            bic["both"] = _bic(both_choice[1], n, k)

    # ties (e.g. one prompt length) go to the first: none, then decay (the common cause)
    order = [m for m in ("none", "decay", "window", "both") if m in bic]
    model = min(order, key=lambda m: (bic[m], order.index(m)))
    fit = AcceptanceFit(
        model=model, bic=bic, n=n, mean=float(y.mean()), separable=separable, notes=notes
    )
    _fill_effects(fit, y, ctx, pos, ones, (decay_choice, step_t, window_choice, both_choice))
    return fit


def profile_by_position(
    output_pos: np.ndarray, commit_len: np.ndarray, *, window: int | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Mean commit length in windows of output position: (window starts, means, window size)."""
    pos = np.asarray(output_pos, dtype=float)
    k = np.asarray(commit_len, dtype=float)
    if pos.size == 0:
        return np.zeros(0), np.zeros(0), 0
    span = float(pos.max()) + 1
    w = window or max(16, int(np.ceil(span / 30 / 16) * 16))
    idx = (pos // w).astype(int)
    starts, means = [], []
    for b in np.unique(idx):
        sel = idx == b
        starts.append(float(b * w))
        means.append(float(k[sel].mean()))
    return np.asarray(starts), np.asarray(means), w


@dataclass(frozen=True)
class Honeymoon:
    """How much a window of the first N tokens (after `start`) overstates the long generation."""

    window_tokens: int
    start: int
    window_commit_len: float
    long_commit_len: float
    window_tps: float | None
    long_tps: float | None

    @property
    def commit_overstatement(self) -> float:
        return self.window_commit_len / self.long_commit_len - 1 if self.long_commit_len else 0.0

    @property
    def tps_overstatement(self) -> float | None:
        if self.window_tps and self.long_tps:
            return self.window_tps / self.long_tps - 1
        return None


def honeymoon(
    commit_len: np.ndarray,
    step_s: np.ndarray,
    output_pos: np.ndarray,
    *,
    window_tokens: int,
    start: int = 0,
) -> Honeymoon | None:
    """Pooled over the given (long-generation) steps: the window [start, start+N) vs everything.
    Token-weighted (sum k / steps), like the two-point method itself."""
    k = np.asarray(commit_len, dtype=float)
    s = np.asarray(step_s, dtype=float)
    pos = np.asarray(output_pos, dtype=float)
    sel = (pos >= start) & (pos < start + window_tokens)
    if sel.sum() < 3 or k.size < 3:
        return None
    return Honeymoon(
        window_tokens=window_tokens,
        start=start,
        window_commit_len=float(k[sel].mean()),
        long_commit_len=float(k.mean()),
        window_tps=float(k[sel].sum() / s[sel].sum()) if s[sel].sum() > 0 else None,
        long_tps=float(k.sum() / s.sum()) if s.sum() > 0 else None,
    )


@dataclass
class ServerAcceptance:
    """What the server said about commit length over the run."""

    mean_commit_len: float | None
    n_steps: float
    source: str
    per_step: bool  # True when built from per-step records (a real histogram)
    histogram: dict[int, int] = field(default_factory=dict)
    by_request: dict[str, list[float]] = field(default_factory=dict)  # per-step, in order
    # True when the figure averages only steps that drafted something (telemetry.commit)
    per_drafted_step: bool = False


def _commit_of(r: SpecRecord) -> float | None:
    """Commit length of a record; None when absent or impossible (< 1, not finite, absurd)."""
    v = None
    if r.commit_len is not None:
        v = r.commit_len
    elif r.accepted_drafts is not None and (r.n_steps == 1 or r.scope == "step"):
        v = r.accepted_drafts + 1
    if v is None or not np.isfinite(v) or v < 1 or v > 1024:
        return None
    return float(v)


def from_telemetry(records: Iterable[SpecRecord]) -> ServerAcceptance | None:
    """Per-step records win (one rank only: TP0 when present, else the first rank seen, so tensor
    parallel duplicates do not double-count); otherwise summaries weighted by n_steps (lifetime
    counters are skipped: they are not about this run)."""
    recs = [r for r in records if _commit_of(r) is not None]
    per_step = [r for r in recs if is_step_record(r.format, r.scope, r.n_steps)]
    if per_step:
        ranks = [r.rank for r in per_step if r.rank]
        keep = "TP0" if "TP0" in ranks else (ranks[0] if ranks else None)
        per_step = [r for r in per_step if r.rank in (keep, None)]
        vals = [float(_commit_of(r)) for r in per_step]
        by_req: dict[str, list[tuple[int, float]]] = {}
        for i, r in enumerate(per_step):
            if r.request_id:
                by_req.setdefault(r.request_id, []).append(
                    (r.step if r.step is not None else i, vals[i])
                )
        formats = sorted({r.format for r in per_step})
        return ServerAcceptance(
            mean_commit_len=float(np.mean(vals)),
            n_steps=len(vals),
            source=f"server per-step records ({', '.join(formats)}{', ' + keep if keep else ''})",
            per_step=True,
            histogram=histogram(vals),
            by_request={k: [v for _, v in sorted(x)] for k, x in by_req.items()},
        )
    summaries = [r for r in recs if r.scope != "lifetime"]
    if not summaries:
        return None
    tally = CommitTally()
    for r in summaries:
        tally.add(
            float(_commit_of(r)),
            per_step=False,
            n_steps=r.n_steps,
            basis=basis_of(r.format, r.scope, r.fields),
        )
    figs = tally.figures()
    drafted_only = figs.mean_commit_len is None
    mean = figs.per_drafted_step if drafted_only else figs.mean_commit_len
    used = [
        r
        for r in summaries
        if (basis_of(r.format, r.scope, r.fields) == DRAFTED_STEPS) == drafted_only
    ]
    formats = sorted({r.format for r in used})
    weighting = (
        "weighted by steps" if any(r.n_steps for r in used) else "unweighted: no step counts"
    )
    return ServerAcceptance(
        mean_commit_len=mean,
        n_steps=float(sum(r.n_steps if r.n_steps and r.n_steps > 0 else 1 for r in used)),
        source=f"server summaries ({', '.join(formats)}; {weighting}"
        + (
            "; per drafted step: steps that drafted nothing are not counted)"
            if drafted_only
            else ")"
        ),
        per_step=False,
        per_drafted_step=drafted_only,
    )
