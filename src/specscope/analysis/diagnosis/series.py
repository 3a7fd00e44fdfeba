"""Plot-ready series of a diagnosis (`Analysis.series`; keys documented there). Pure: no I/O."""

from __future__ import annotations

from typing import Any

import numpy as np

from specscope.analysis.diagnosis.facts import TwoPointFacts
from specscope.analysis.fits import acceptance as acc
from specscope.analysis.headline import decompose as dec
from specscope.analysis.headline.measure import Measured, StepTable, concurrency_of, prompt_len
from specscope.analysis.steps.reconstruct import StepReconstruction
from specscope.trace import tags
from specscope.trace.model import RequestTrace, Step


def _groups(
    reqs: list[RequestTrace], recs: dict[int, StepReconstruction], key
) -> dict[int, dec.Decomposition]:
    out: dict[int, list[Step]] = {}
    for r in reqs:
        k = key(r)
        if k is None or not recs[r.index].reliable:
            continue
        out.setdefault(k, []).extend(recs[r.index].steps)
    return {
        k: dec.decompose([s.commit_len for s in v], [s.step_s for s in v])
        for k, v in sorted(out.items())
        if v
    }


def commit_len_histogram(
    m: Measured, mt: StepTable | None, server: acc.ServerAcceptance | None
) -> dict[str, Any] | None:
    """Server per-step records first (the real histogram), else the main requests' reliable
    client steps, else the server's per-request accept histograms."""
    if server is not None and server.per_step and server.histogram:
        hist, src = server.histogram, server.source
    elif mt is not None and mt.n:
        hist, src = acc.histogram(mt.commit), f"client chunks ({m.main_label})"
    else:
        hist, src = {}, ""
        merged: dict[int, int] = {}
        for r in m.main:
            hh = r.server_spec.accept_histogram if r.server_spec else None
            for k, v in enumerate(hh or []):
                merged[k + 1] = merged.get(k + 1, 0) + int(v)
        if merged:
            hist, src = dict(sorted(merged.items())), "server per-request accept histogram"
    if not hist:
        return None
    return {"commit_len": list(hist), "count": list(hist.values()), "source": src}


def build_series(
    m: Measured,
    mt: StepTable | None,
    server: acc.ServerAcceptance | None,
    tp: TwoPointFacts,
    concurrency: tuple[tuple[int, float, float | None], ...],
    *,
    step_profile: dict[str, Any] | None = None,
    baseline: dict[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if step_profile is not None:
        out["step_time_by_position"] = step_profile
    if baseline is not None:
        out["baseline_vs_observed"] = baseline
    hist = commit_len_histogram(m, mt, server)
    if hist is not None:
        out["commit_len_histogram"] = hist
    if mt is not None and mt.n:
        starts, means, _ = acc.profile_by_position(mt.pos, mt.commit)
        out["commit_len_by_position"] = {
            "output_pos": starts.tolist(),
            "mean_commit_len": means.tolist(),
        }
    sweep = [r for r in m.ok if tags.split(r.spec.tag)[0] == tags.CONTEXT_SWEEP]
    groups = _groups(
        sweep or [r for r in m.ok if concurrency_of(r) == 1],
        m.recs,
        lambda r: prompt_len(r) or None,
    )
    if groups:
        out["tps_by_context"] = {
            "context": list(groups),
            "decode_tps": [d.decode_tps for d in groups.values()],
            "step_s": [d.mean_step_s for d in groups.values()],
            "commit_len": [d.mean_commit_len for d in groups.values()],
        }
    osw = [r for r in m.ok if tags.split(r.spec.tag)[0] == tags.OUTPUT_SWEEP]
    og = _groups(osw, m.recs, lambda r: r.spec.max_tokens)
    if og:
        out["tps_by_output_len"] = {
            "max_tokens": list(og),
            "decode_tps": [d.decode_tps for d in og.values()],
        }
    decode_tps = m.headline.decode_tps if m.headline is not None else None
    if tp.estimate is not None and decode_tps:
        t = tp.estimate
        out["two_point_vs_full"] = {
            "label": [f"two-point {t.n1}->{t.n2} @ {t.prompt_tokens}", f"{m.main_label}"],
            "decode_tps": [t.decode_tps, decode_tps],
        }
    if concurrency:
        out["concurrency"] = {
            "concurrency": [c for c, _, _ in concurrency],
            "decode_tps_per_request": [t for _, t, _ in concurrency],
            "step_s": [s for _, _, s in concurrency],
        }
    return plain(out)


def plain(x):
    """numpy scalars/arrays to plain Python, so that analysis.json serialises."""
    if isinstance(x, dict):
        return {(plain(k) if isinstance(k, np.generic) else k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return plain(x.tolist())
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x
