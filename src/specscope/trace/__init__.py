"""The data model every layer shares: what was sent, what came back, and when."""

from specscope.trace.model import (
    SCHEMA_VERSION,
    Chunk,
    ErrorInfo,
    RequestSpec,
    RequestTrace,
    Run,
    RunInfo,
    ServerSpecFields,
    Step,
)
from specscope.trace.rundir import RunDirReader, RunDirWriter, load_run

__all__ = [
    "SCHEMA_VERSION",
    "Chunk",
    "ErrorInfo",
    "RequestSpec",
    "RequestTrace",
    "Run",
    "RunDirReader",
    "RunDirWriter",
    "RunInfo",
    "ServerSpecFields",
    "Step",
    "load_run",
]
