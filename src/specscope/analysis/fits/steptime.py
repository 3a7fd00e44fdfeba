"""The step-time model: what context explains, and what grows with output position beyond it.

ARCHITECTURE §1: `s = s0 + a*context (+ b*verified_tokens) + noise` at concurrency 1. Within one
generation, context = prompt + output position, so context and output position are perfectly
collinear and a single request cannot tell attention scaling from stateful degradation (the
story's puzzle). Pooling steps from requests with *different prompt lengths* (context sweep,
two-point, output sweep: short prompt, long generation) breaks the collinearity, and one joint
regression

    s = s0 + a*context + d*output_pos (+ c*commit_len)

separates the context effect `a` from the output-length effect `d` (drift). The fit is robust
(Huber loss, scale from the MAD) because step times have spikes (GC, scheduler, other tenants).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize, stats

KTOK = 1000.0  # regressors are scaled to thousands of tokens for conditioning
HUBER_K = 1.345  # 95% Gaussian efficiency, the textbook Huber constant
# Steps this many robust sds above or below the fit are not step time but a stall (a GC pause,
# a scheduler hiccup, a fault): they are left out of the fit. Huber bounds their influence but
# does not remove it, and stalls come per request, not per step, so they are denser in short
# requests (low output positions) and would bias the drift slope low (the twin's stalls did,
# by ~0.4 SE, and widened its spread past its SE).
REJECT_SIGMAS = 6.0
# ... unless that many steps lie so far out: stalls are rare (the twin's ~0.7% of a quick
# diagnosis' steps); more than this share is the steps' own structure (a second mode: steps that
# drafted nothing, a batch step), which the fit must keep.
MAX_STALL_SHARE = 0.02
# Context and output position are separable only when prompt lengths differ enough: at least
# 64 tokens of spread and a correlation below 0.95 between the two regressors (above that the
# standard errors blow up by > 3x and the split is not worth reporting).
MIN_PROMPT_SPREAD = 64
MAX_COLLINEARITY = 0.95
# Drift is reported only when it is significant AND large:
DRIFT_Z = 3.0  # |slope| / se above 3 (two-sided p < 0.003), after inflating se for autocorrelation
DRIFT_MIN_SHARE = 0.10  # total drift over the generation >= 10% of the mean step time: below that
# it moves tps by < 10%, inside run-to-run variation of real services
DRIFT_MIN_NOISE = 0.5  # ... and >= half the per-step noise sd, so it is visible above the noise
MIN_STEPS = 12


@dataclass
class StepTimeFit:
    """Coefficients in seconds per token (per_output_token is the drift)."""

    s0: float
    per_context_token: float
    per_output_token: float | None  # None when context and output position are confounded
    per_commit_token: float | None
    se: dict[str, float]
    sigma: float  # robust residual sd (1.4826 * MAD)
    r2: float
    n: int
    identifiable: bool  # context and output position separable
    autocorr: float  # lag-1 residual autocorrelation within requests
    prompt_spread: float
    reason: str = ""
    residuals: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    #: Steps the fit used (False: a stall, left out); aligned with `residuals`.
    kept: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool), repr=False)
    #: Residual (s) beyond which a step was taken for a stall; None when none was left out.
    stall_above_s: float | None = None

    @property
    def stalls(self) -> int:
        return int(self.kept.size - self.kept.sum())

    def expected(self, context: np.ndarray, commit_len: np.ndarray | None = None) -> np.ndarray:
        """Step time the context (and commit length) explain, without any drift term."""
        e = self.s0 + self.per_context_token * np.asarray(context, dtype=float)
        if self.per_commit_token is not None and commit_len is not None:
            e = e + self.per_commit_token * np.asarray(commit_len, dtype=float)
        return e

    def to_dict(self) -> dict[str, Any]:
        return {
            "s0": self.s0,
            "per_context_token": self.per_context_token,
            "per_output_token": self.per_output_token,
            "per_commit_token": self.per_commit_token,
            "se": self.se,
            "sigma": self.sigma,
            "r2": self.r2,
            "n_steps": self.n,
            "context_output_separable": bool(self.identifiable),
            "residual_autocorr": self.autocorr,
            "prompt_spread_tokens": self.prompt_spread,
            "method": "Huber robust regression (scipy.optimize.least_squares), steps more "
            f"than {REJECT_SIGMAS:g} robust sds off the fit left out as stalls",
            "stalls_left_out": self.stalls,
            "note": self.reason,
        }


def _mad_sigma(x: np.ndarray) -> float:
    return float(stats.median_abs_deviation(x, scale="normal")) if x.size else 0.0


def _lag1_autocorr(resid: np.ndarray, groups: np.ndarray) -> float:
    """Pooled lag-1 autocorrelation of residuals within each request (order as given)."""
    num = den = 0.0
    for g in np.unique(groups):
        r = resid[groups == g]
        r = r - r.mean()
        if r.size > 2:
            num += float(np.dot(r[1:], r[:-1]))
            den += float(np.dot(r, r))
    return num / den if den > 0 else 0.0


def _huber(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    beta0, *_ = np.linalg.lstsq(x, y, rcond=None)
    sigma = _mad_sigma(y - x @ beta0) or float(np.std(y)) or 1e-9
    res = optimize.least_squares(
        lambda b: x @ b - y, beta0, loss="huber", f_scale=HUBER_K * sigma, method="trf"
    )
    resid = y - x @ res.x
    return res.x, resid, _mad_sigma(resid) or sigma


def huber_fit(
    x: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, float | None]:
    """Huber regression of y on design x without the stalls: (coefficients, residuals of every
    row, robust sigma of the kept rows, the kept mask, the residual a stall lies beyond or
    None). Rows more than REJECT_SIGMAS robust sds from a first fit are left out and the fit
    made again on the rest, when they are rare enough to be stalls (MAX_STALL_SHARE)."""
    beta, resid, sigma = _huber(x, y)
    above = REJECT_SIGMAS * sigma
    kept = np.abs(resid) <= above
    out = y.size - int(kept.sum())
    if out == 0 or out > MAX_STALL_SHARE * y.size or kept.sum() < max(MIN_STEPS, 2 * x.shape[1]):
        return beta, resid, sigma, np.ones(y.size, dtype=bool), None
    beta, _, sigma = _huber(x[kept], y[kept])
    return beta, y - x @ beta, sigma, kept, above


def _identifiable(ctx: np.ndarray, pos: np.ndarray) -> tuple[bool, float]:
    """Whether context and output position can be told apart (prompts of different lengths, not
    collinear), with the prompt spread: without that the drift term cannot be fitted."""
    prompt = ctx - pos
    spread = float(np.ptp(prompt)) if prompt.size else 0.0
    corr = 1.0
    if np.std(ctx) > 0 and np.std(pos) > 0:
        corr = float(abs(np.corrcoef(ctx, pos)[0, 1]))
    identifiable = spread >= MIN_PROMPT_SPREAD and corr < MAX_COLLINEARITY and np.std(pos) > 0
    return identifiable, spread


def _design(
    y: np.ndarray, ctx: np.ndarray, pos: np.ndarray, kl: np.ndarray | None, identifiable: bool
) -> tuple[np.ndarray, list[str]]:
    """The regression's columns: each term only where the data can carry it (context that
    varies, output position when identifiable, commit length when it varies enough)."""
    cols = [np.ones_like(y), ctx / KTOK]
    names = ["s0", "per_context_token"]
    if np.std(ctx) == 0:  # no context variation at all: nothing but a mean
        cols, names = [np.ones_like(y)], ["s0"]
    if identifiable:
        cols.append(pos / KTOK)
        names.append("per_output_token")
    use_commit = kl is not None and float(np.std(kl)) > 0.3 and y.size > 50
    if use_commit:
        cols.append(kl)
        names.append("per_commit_token")
    return np.column_stack(cols), names


def _per_token(
    x: np.ndarray, names: list[str], beta: np.ndarray, sigma: float, kept: np.ndarray, rho: float
) -> tuple[dict[str, float], dict[str, float]]:
    """Coefficients and standard errors in per-token units, the errors inflated for lag-1
    autocorrelation: neighbouring steps of one request are not independent draws."""
    inflation = (1 + rho) / (1 - rho) if 0 < rho < 0.95 else (39.0 if rho >= 0.95 else 1.0)
    try:
        cov = sigma**2 * np.linalg.inv(x[kept].T @ x[kept]) * inflation
        se_raw = np.sqrt(np.clip(np.diag(cov), 0, None))
    except np.linalg.LinAlgError:
        se_raw = np.full(len(names), np.inf)
    scale = {
        "s0": 1.0,
        "per_context_token": KTOK,
        "per_output_token": KTOK,
        "per_commit_token": 1.0,
    }
    coef = {n: float(b) / scale[n] for n, b in zip(names, beta, strict=True)}
    se = {n: float(s) / scale[n] for n, s in zip(names, se_raw, strict=True)}
    return coef, se


def fit_step_time(
    step_s: np.ndarray,
    context: np.ndarray,
    output_pos: np.ndarray,
    *,
    commit_len: np.ndarray | None = None,
    request_ids: np.ndarray | None = None,
) -> StepTimeFit | None:
    """Joint robust fit; drops the drift term (and says so) when prompts do not vary enough."""
    y = np.asarray(step_s, dtype=float)
    ctx = np.asarray(context, dtype=float)
    pos = np.asarray(output_pos, dtype=float)
    ok = np.isfinite(y) & np.isfinite(ctx) & (y > 0)
    if ok.sum() < MIN_STEPS:
        return None
    y, ctx, pos = y[ok], ctx[ok], pos[ok]
    groups = np.asarray(request_ids)[ok] if request_ids is not None else np.zeros(y.size)
    kl = np.asarray(commit_len, dtype=float)[ok] if commit_len is not None else None

    identifiable, spread = _identifiable(ctx, pos)
    reason = (
        ""
        if identifiable
        else "context and output position are confounded (one prompt length): the context "
        "slope below includes any output-length effect"
    )

    x, names = _design(y, ctx, pos, kl, identifiable)
    beta, resid, sigma, kept, stall_above = huber_fit(x, y)
    rho = _lag1_autocorr(resid[kept], groups[kept])
    coef, se = _per_token(x, names, beta, sigma, kept, rho)
    yk = y[kept]
    ss_tot = float(np.sum((yk - yk.mean()) ** 2))
    r2 = 1 - float(np.sum(resid[kept] ** 2)) / ss_tot if ss_tot > 0 else 0.0
    return StepTimeFit(
        s0=coef["s0"],
        per_context_token=coef.get("per_context_token", 0.0),
        per_output_token=coef.get("per_output_token"),
        per_commit_token=coef.get("per_commit_token"),
        se=se,
        sigma=sigma,
        r2=r2,
        n=int(y.size),
        identifiable=bool(identifiable),
        autocorr=float(rho),
        prompt_spread=spread,
        reason=reason,
        residuals=resid,
        kept=kept,
        stall_above_s=stall_above,
    )


@dataclass(frozen=True)
class DriftTest:
    """The output-position test at fixed context: slope with CI, and whether it counts."""

    slope_s_per_token: float
    ci: tuple[float, float]
    z: float
    span_tokens: float
    total_drift_s: float
    mean_step_s: float
    noise_sd: float
    significant: bool
    large: bool

    @property
    def present(self) -> bool:
        return self.significant and self.large and self.slope_s_per_token > 0

    @property
    def share(self) -> float:
        return self.total_drift_s / self.mean_step_s if self.mean_step_s > 0 else 0.0


def drift_test(fit: StepTimeFit, *, span_tokens: float, mean_step_s: float) -> DriftTest | None:
    """Is the output-position slope significant (z > 3) AND larger than noise (>= 10% of the mean
    step over the generation, >= half the per-step noise sd)? None when not identifiable."""
    if not fit.identifiable or fit.per_output_token is None:
        return None
    d = fit.per_output_token
    se = fit.se.get("per_output_token", float("inf"))
    z = d / se if se > 0 else 0.0
    total = d * span_tokens
    significant = abs(z) >= DRIFT_Z
    large = (
        abs(total) >= DRIFT_MIN_SHARE * mean_step_s and abs(total) >= DRIFT_MIN_NOISE * fit.sigma
    )
    return DriftTest(
        slope_s_per_token=d,
        ci=(d - 1.96 * se, d + 1.96 * se),
        z=z,
        span_tokens=span_tokens,
        total_drift_s=total,
        mean_step_s=mean_step_s,
        noise_sd=fit.sigma,
        significant=significant,
        large=large,
    )


def context_effect(fit: StepTimeFit, context_low: float, context_high: float) -> float:
    """Relative step-time growth the context term predicts from context_low to context_high."""
    base = fit.s0 + fit.per_context_token * context_low
    return fit.per_context_token * (context_high - context_low) / base if base > 0 else 0.0


def binned_profile(
    x: np.ndarray, y: np.ndarray, *, bins: int = 30, min_per_bin: int = 3
) -> tuple[np.ndarray, np.ndarray]:
    """Mean of y in equal-width bins of x (bin centres); empty bins dropped. For plot series."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.size == 0:
        return np.zeros(0), np.zeros(0)
    edges = np.linspace(x.min(), x.max() + 1e-9, bins + 1)
    which = np.clip(np.digitize(x, edges) - 1, 0, bins - 1)
    centres, means = [], []
    for b in range(bins):
        sel = which == b
        if sel.sum() >= min_per_bin:
            centres.append(float(x[sel].mean()))
            means.append(float(y[sel].mean()))
    return np.asarray(centres), np.asarray(means)
