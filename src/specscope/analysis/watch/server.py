"""What the server said about itself in a window (passive: Prometheus deltas and log records),
summarised, and the window's speculation state from it and the canaries
(analysis.steps.speculation's rules)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specscope.analysis.steps.speculation import SpeculationState, speculation_state
from specscope.analysis.watch.sample import CanarySample
from specscope.telemetry.records import SpecRecord


def server_figures(records: Sequence[SpecRecord]) -> dict[str, Any] | None:
    """The records' commit length (weighted by the steps each covers where it says, else one
    record one vote), their steps and where they came from; None without a commit length."""
    with_commit = [r for r in records if r.commit_len is not None]
    if not with_commit:
        return None
    weights = [float(r.n_steps or 1) for r in with_commit]
    total = sum(weights)
    commit = sum(w * float(r.commit_len or 0.0) for w, r in zip(weights, with_commit, strict=True))
    rates = [r.accept_rate for r in with_commit if r.accept_rate is not None]
    return {
        "commit_len": commit / total,
        "accept_rate": sum(rates) / len(rates) if rates else None,
        "steps": int(sum(r.n_steps or 0 for r in with_commit)) or None,
        "records": len(with_commit),
        "sources": sorted({r.format for r in with_commit}),
    }


def window_speculation(
    server_info: dict[str, Any], samples: Sequence[CanarySample], records: Sequence[SpecRecord]
) -> SpeculationState:
    """The window's speculation state: the canaries' reliable steps (each sample's steps at
    its mean commit length) and the window's server records first; the server's info (read
    at the watch's start, stale after a restart) only when they cannot tell."""
    commits = [s.commit_len for s in samples if s.reliable for _ in range(s.steps)]
    live = speculation_state({}, commits, [], records)
    if live.on is not None:
        return live
    return speculation_state(server_info, commits, [], records)
