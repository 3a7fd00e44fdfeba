"""Is the diagnosed server speculating at all?

Acceptance findings presuppose a drafter: against a plain server (commit length exactly 1 at
every step, no draft counters anywhere) "the drafter rarely gets a draft accepted" is wrong —
there is no drafter. This module decides, from what the run holds, whether speculation is
on, off or unknown, and says why, so findings can stay silent and the analysis can state it.

Order of evidence (strongest first):
1. drafting observed: reliable client steps commit more than PLAIN_COMMIT tokens on average
   (a plain server's stream can still show a rare 2-token burst when two events share a read,
   so one step over 1 is not proof), or a server figure shows
   drafts (proposed/accepted drafts, accept length > 1, an accept histogram beyond 0, a log or
   counter record with drafts) -> on;
2. the server's info declares it (`speculative_algorithm`, `speculative_num_draft_tokens`,
   `num_draft_tokens`, vLLM's `speculative_config`) -> on / off as declared. Declared on with
   every step at 1 token is a drafter whose drafts are all rejected: acceptance findings apply;
3. nothing declared, enough reliable client steps, ~1 token each on average and no server
   figure of drafting -> off (a server may also be speculating with every draft rejected and no
   telemetry at all; the reason says so);
4. otherwise unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from specscope.analysis.steps.reconstruct import StepReconstruction, one_token_steps
from specscope.telemetry.records import SpecRecord
from specscope.trace.model import RequestTrace, ServerSpecFields

# Fewer one-token steps than this say too little to call speculation off from the data alone.
MIN_STEPS_FOR_OFF = 8
# Mean client commit length at or below this is plain decoding (`plain_decoding`).
PLAIN_COMMIT = 1.05
_OFF_ALGORITHMS = {"", "none", "null", "off", "disabled"}


@dataclass(frozen=True)
class SpeculationState:
    on: bool | None  # None = unknown
    reason: str

    @property
    def off(self) -> bool:
        return self.on is False

    @property
    def label(self) -> str:
        """The state as the JSON contract spells it: on | off | unknown."""
        return "unknown" if self.on is None else ("on" if self.on else "off")


def plain_decoding(state: SpeculationState | None, mean_commit_len: float | None) -> bool:
    """Whether a run is plain decoding: its speculation state when that is known, else ~1 token
    a step. The one definition findings (a plain baseline) and breakeven (switching off) use."""
    if state is not None and state.on is not None:
        return state.off
    return (mean_commit_len or 0) <= PLAIN_COMMIT


def declared(server_info: dict[str, Any]) -> tuple[bool | None, str]:
    """(on/off/None, which key said so) from the server's info endpoint."""
    if "speculative_algorithm" in server_info:
        alg = server_info["speculative_algorithm"]
        if alg is None or str(alg).strip().lower() in _OFF_ALGORITHMS:
            return False, f"server info: speculative_algorithm={alg!r}"
        return True, f"server info: speculative_algorithm={alg!r}"
    for key in ("speculative_num_draft_tokens", "num_draft_tokens"):
        if key in server_info:
            v = server_info[key]
            numeric = isinstance(v, int | float) and not isinstance(v, bool)
            if numeric and v > 1:  # counts the current token: 1 means no drafts
                return True, f"server info: {key}={v}"
            if v is None or (numeric and v <= 1):
                return False, f"server info: {key}={v!r}"
    vc = server_info.get("vllm_config")
    if isinstance(vc, dict) and "speculative_config" in vc:
        sc = vc["speculative_config"]
        return (bool(sc), f"server info: vllm_config.speculative_config={'set' if sc else 'None'}")
    return None, ""


#: Server-info keys that state the drafter's context window (SGLang's name, then its older alias).
DRAFT_WINDOW_KEYS = ("speculative_draft_window_size", "speculative_dflash_draft_window_size")


def stated_draft_window(server_info: dict[str, Any]) -> tuple[int, str] | None:
    """(tokens, the key that said so) where the server states its drafter's window; None where
    it states none (or null: no window)."""
    for key in DRAFT_WINDOW_KEYS:
        v = server_info.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
            return int(v), key
    return None


def _fields_draft(f: ServerSpecFields) -> bool:
    if (f.proposed_drafts or 0) > 0 or (f.accepted_drafts or 0) > 0:
        return True
    if f.accept_length is not None and f.accept_length > 1.0 + 1e-9:
        return True
    if f.per_step_accepted and any(a > 0 for a in f.per_step_accepted):
        return True
    return bool(f.accept_histogram and any(v > 0 for v in f.accept_histogram[1:]))


def _record_drafts(r: SpecRecord) -> bool:
    if r.commit_len is not None and r.commit_len > 1.0 + 1e-9:
        return True
    if (r.accepted_drafts or 0) > 0:
        return True
    generated = r.fields.get("generated") or r.fields.get("gen_tokens")
    if isinstance(generated, int | float) and generated > 0:
        return True
    delta = r.fields.get("delta")
    return isinstance(delta, dict) and any(
        (delta.get(k) or 0) > 0 for k in ("drafts", "draft_tokens", "accepted_tokens")
    )


def speculation_state(
    server_info: dict[str, Any],
    client_commits: Sequence[float],
    server_fields: Sequence[ServerSpecFields | None],
    telemetry: Iterable[SpecRecord] = (),
) -> SpeculationState:
    """`client_commits`: commit lengths of the reliable client steps (unreliable ones say
    nothing: a coalesced chunk of 4 tokens is not a 4-token step)."""
    mean = sum(client_commits) / len(client_commits) if client_commits else None
    if any(_fields_draft(f) for f in server_fields if f is not None):
        return SpeculationState(True, "the server's per-request fields report drafts")
    if any(_record_drafts(r) for r in telemetry):
        return SpeculationState(True, "server telemetry reports drafts")
    # the server's own word before the client's chunks: a chunk can merge steps (a server whose
    # consumer fell behind sends several tokens at once), a declaration cannot
    said, why = declared(server_info)
    if said is True:
        return SpeculationState(True, why)
    if said is False:
        return SpeculationState(False, f"speculation is off ({why}); every step commits one token")
    if mean is not None and mean > PLAIN_COMMIT:
        return SpeculationState(True, f"client-observed steps commit {mean:.2f} tokens on average")
    reported = [f for f in server_fields if f is not None and f.proposed_drafts is not None]
    if reported and all(f.proposed_drafts == 0 for f in reported):
        sources = (
            ", ".join(sorted({f.source for f in reported if f.source})) or "per-request fields"
        )
        return SpeculationState(
            False,
            f"speculation looks off: the server's per-request fields ({sources}) report no "
            f"draft in any of {len(reported)} requests",
        )
    if len(client_commits) >= MIN_STEPS_FOR_OFF:
        return SpeculationState(
            False,
            f"speculation looks off: {len(client_commits)} client-observed steps commit "
            f"{mean:.2f} tokens on average and no server figure shows a draft (a server "
            "speculating with every draft rejected would look the same; its draft counters "
            "would tell)",
        )
    return SpeculationState(None, "too few reliable steps and no server figure to tell")


def state_of_requests(
    server_info: dict[str, Any],
    traces: Sequence[RequestTrace],
    recs: Sequence[StepReconstruction],
    telemetry: Iterable[SpecRecord] = (),
) -> SpeculationState:
    """The state of a run from its successful requests (`recs` aligned with `traces`): their
    reliable steps' commit lengths and their per-request server fields; what `diagnose` and
    `probe` both state."""
    ok = [(t, r) for t, r in zip(traces, recs, strict=True) if t.ok]
    commits = [float(s.commit_len) for _, r in ok if r.reliable for s in r.steps]
    return speculation_state(server_info, commits, [t.server_spec for t, _ in ok], telemetry)


def as_stated(
    state: SpeculationState, recs: Sequence[StepReconstruction]
) -> list[StepReconstruction]:
    """The reconstructions as the state says the steps were: with speculation off every step
    commits one token, so a chunk of several tokens (merged by a server whose consumer fell
    behind, as vLLM's output processor does, or read late) is that many steps."""
    return [one_token_steps(r) for r in recs] if state.off else list(recs)
