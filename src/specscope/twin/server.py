"""The twin behind a background loopback server: the fixture tests, benches and the embedded
`specscope diagnose` (without a URL) start.

    handle = start_twin_server("seed-regression", time_scale=0.2)
    ... handle.url ...   # e.g. http://127.0.0.1:41234
    handle.stop()
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specscope.serve.options import ServeOptions
from specscope.serve.runner import ServerHandle, run_server
from specscope.twin.backend import TwinBackend
from specscope.twin.scenario import Scenario, load_scenario


def start_twin_server(
    scenario: Any = "seed-regression",
    *,
    time_scale: float | None = None,
    truth_file: Path | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    **options: Any,
) -> ServerHandle:
    """The twin behind a background server. `scenario` is a Scenario, a shipped name
    ("seed-regression", "speculation-overhead:baseline") or a TOML path; `options` are
    ServeOptions fields (stream_interval, per_token_events, decode_log_interval, log_file, ...)."""
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    if time_scale is not None:
        sc = sc.scaled(time_scale)
    options.setdefault("log_to_stderr", False)
    return run_server(TwinBackend(sc, truth_file), ServeOptions(**options), host, port)
