"""The embedded default server `specscope diagnose` starts when given no URL.

The one place that chooses between the measured things (engine or twin) for a user: the
engine with a speculative configuration when it builds (torch installed) and really
speculates, else the twin with the seed-regression scenario, saying why. Started on
127.0.0.1 in a thread behind `serve`; its log file and /metrics are the run's evidence.
The engine, serve and twin are imported only when a server is started: the CLI's other
commands never pay for torch or uvicorn.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_SCENARIO = "seed-regression"
# The embedded server's thread shares the GIL with the measuring client's event loop: at
# Python's default 5 ms switch interval a chunk that arrives while the server thread runs
# Python waits up to 5 ms to be stamped (the client's p99 loop lag read 5.01 ms against the
# twin's 17 ms steps, which its guard calls client-limited). A 0.5 ms interval bounds that
# wait at a tenth of the switch cost (probe.health; analysis/client_health.py).
EMBEDDED_SWITCH_S = 0.0005
# Speculation settings asked of the engine for the embedded default (n-gram drafts, DDTree verify);
# the engine is used only when the backend it builds really speculates.
ENGINE_SPEC_OPTIONS: dict[str, Any] = {"drafter": "ngram", "verify": "tree", "num_draft_tokens": 4}


class ServerStartError(Exception):
    """The embedded server did not come up."""


@dataclass(frozen=True)
class EmbeddedServer:
    """A started embedded server: its base URL, what it is, and why a fallback was taken."""

    url: str
    description: str
    notes: list[str] = field(default_factory=list)


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _engine_backend() -> tuple[Any, str]:
    """The engine, speculating: the n-gram tree is faster than plain decoding on this project's
    2-core CPU machines as on a GPU (bench/embedded_default.py measures it against plain, served
    and probed as a user would), so it is the default on both."""
    from specscope.engine.factory import build_backend

    device = "cuda" if _cuda_available() else "cpu"
    backend = build_backend(device=device, **ENGINE_SPEC_OPTIONS)
    info = backend.info
    if not info.num_draft_tokens:
        raise ServerStartError("the engine built without speculation")
    return backend, (
        f"engine {info.model} on {device} ({info.spec_algorithm}, "
        f"{info.num_draft_tokens} draft tokens)"
    )


@contextlib.contextmanager
def embedded_server(
    scenario: str | None = None,
    time_scale: float | None = None,
    backend: str | None = None,
    log_file: Path | None = None,
) -> Iterator[EmbeddedServer]:
    """Start the default server on 127.0.0.1 in a thread; yield it, stop it on exit.

    `backend` "engine" or "twin" forces one (an engine that fails then raises
    ServerStartError); `scenario`/`time_scale` choose the twin. Its log goes to `log_file`.
    """
    from specscope.serve.options import ServeOptions
    from specscope.serve.runner import run_server
    from specscope.twin.server import start_twin_server

    notes: list[str] = []
    handle = None
    description = ""
    try:
        if backend == "engine" or (backend is None and scenario is None):
            try:
                be, description = _engine_backend()
                handle = run_server(be, ServeOptions(log_file=log_file, log_to_stderr=False))
            except Exception as e:
                if backend == "engine":
                    raise ServerStartError(f"engine: {e.__class__.__name__}: {e}") from None
                notes.append(
                    f"embedded engine not used ({e.__class__.__name__}: {e}); "
                    f"diagnosing the twin ({DEFAULT_SCENARIO}) instead"
                )
        if handle is None:
            name = scenario or DEFAULT_SCENARIO
            handle = start_twin_server(name, time_scale=time_scale, log_file=log_file)
            scale = f", time scale {time_scale:g}" if time_scale else ""
            description = f"twin scenario {name}{scale}"
    except ServerStartError:
        raise
    except Exception as e:
        raise ServerStartError(f"{e.__class__.__name__}: {e}") from None
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, EMBEDDED_SWITCH_S))
    try:
        yield EmbeddedServer(handle.url, description, notes)
    finally:
        sys.setswitchinterval(switch)
        handle.stop()
