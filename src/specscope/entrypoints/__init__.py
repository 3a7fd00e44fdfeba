"""Library entry points: what a command does, callable without the CLI (like guidellm's
`entrypoints.py`). Each takes a frozen options object and returns what it measured; nothing
here parses flags or prints, and the commands only parse and render.

- `diagnose_run(DiagnoseOptions, DiagnoseHooks) -> Diagnosis` (specscope diagnose)
- `probe_run(ProbeOptions, progress) -> ProbeOutcome` (specscope probe; a coroutine)

`DiagnoseOptions` and `ProbeOptions` check themselves when built: bad options raise
`OptionError` (a ValueError) with the message the command prints.
"""

from specscope.entrypoints.diagnose import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    DiagnoseHooks,
    DiagnoseInputError,
    DiagnoseInterrupted,
    DiagnoseOptions,
    Diagnosis,
    EmbeddedChoice,
    NothingMeasured,
    diagnose_run,
)
from specscope.entrypoints.options import OptionError
from specscope.entrypoints.probe import ProbeInputError, ProbeOptions, ProbeOutcome, probe_run

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_PROMPT_TOKENS",
    "DiagnoseHooks",
    "DiagnoseInputError",
    "DiagnoseInterrupted",
    "DiagnoseOptions",
    "Diagnosis",
    "EmbeddedChoice",
    "NothingMeasured",
    "OptionError",
    "ProbeInputError",
    "ProbeOptions",
    "ProbeOutcome",
    "diagnose_run",
    "probe_run",
]
