"""`--diagnose-on-alert`: a full `specscope diagnose URL --quick` run when an alert fires, in a
child process (the CLI's own contract: its JSON object and run directory), without a shell and
with a timeout. One at a time (an alert while one runs is not queued), and the canary pauses
while it runs: the diagnosis' own requests (a concurrency sweep among them) would otherwise be
read by the canary as the server's load."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from specscope.watch.child import run_child

DIAGNOSE_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class DiagnosisDone:
    run_dir: str | None
    exit_code: int | None  # None: it did not finish within the timeout
    cause: str | None  # the diagnosis' top cause (findings[0].cause), when it gave one
    message: str


async def diagnose(
    url: str, out: Path | None, timeout_s: float = DIAGNOSE_TIMEOUT_S
) -> DiagnosisDone:
    """`specscope diagnose URL --quick --json [--out OUT]` in a child; its verdict and top cause."""
    argv = [sys.executable, "-m", "specscope.cli", "diagnose", url, "--quick", "--json"]
    argv += ["--out", str(out)] if out is not None else []
    done = await run_child(argv, None, timeout_s)
    if done.returncode is None:
        where = str(out) if out is not None else None
        return DiagnosisDone(where, None, None, f"diagnose still running after {timeout_s:g} s")
    try:
        obj = json.loads(done.stdout.decode("utf-8", "replace"))
    except ValueError:
        obj = {}
    findings = obj.get("findings") or [] if isinstance(obj, dict) else []
    cause = findings[0].get("cause") if findings and isinstance(findings[0], dict) else None
    verdict = obj.get("verdict") if isinstance(obj, dict) else None
    message = " ".join(verdict) if isinstance(verdict, list) else str(obj.get("error", ""))
    run_dir = obj.get("run_dir") if isinstance(obj, dict) else None
    return DiagnosisDone(run_dir, done.returncode, cause, message[:2000])
