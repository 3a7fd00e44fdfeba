"""Checks of the entry points' options, run when an options object is built, so that a library
caller gets the same refusals as the command line (whose flags the messages name)."""

from __future__ import annotations

from specscope.probe.client import Timeouts


class OptionError(ValueError):
    """An option out of range, or options that do not go together; `specscope` prints the
    message as its one-line usage error (exit 2)."""


def precision_problem(
    precision: float | None, budget_s: float | None, budget_tokens: int | None
) -> str | None:
    """Why --precision P (within [0, 1)), --budget-s or --budget-tokens (>= 0) is refused, or
    None."""
    if precision is not None and not 0 <= precision < 1:
        return (
            f"--precision must be a relative half-width within [0, 1), e.g. 0.05 (got {precision})"
        )
    if budget_s is not None and not 0 <= budget_s < float("inf"):
        return f"--budget-s must be a number of seconds >= 0 (got {budget_s})"
    if budget_tokens is not None and budget_tokens < 0:
        return f"--budget-tokens must be >= 0 (got {budget_tokens})"
    return None


def timeouts_problem(timeouts: Timeouts) -> str | None:
    """Why one of the --timeout-* seconds is refused (each must be finite and > 0), or None."""
    for name, sec in (
        ("--timeout-connect", timeouts.connect),
        ("--timeout-first-byte", timeouts.first_byte),
        ("--timeout-between-chunks", timeouts.between_chunks),
        ("--timeout-total", timeouts.total),
    ):
        if not sec > 0 or sec == float("inf"):
            return f"{name} must be a number of seconds > 0, got {sec}"
    return None
