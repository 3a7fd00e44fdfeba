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
from specscope.twin.switch import SwitchingTwinBackend


def start_twin_server(
    scenario: Any = "seed-regression",
    *,
    time_scale: float | None = None,
    truth_file: Path | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    switch_to: Any = None,
    switch_after: float = 0.0,
    **options: Any,
) -> ServerHandle:
    """The twin behind a background server. `scenario` is a Scenario, a shipped name
    ("seed-regression", "speculation-overhead:baseline") or a TOML path; `options` are
    ServeOptions fields (stream_interval, per_token_events, decode_log_interval, log_file, ...).
    `switch_to` (a scenario or its name): serve it instead from `switch_after` seconds on
    (twin/switch.py)."""
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    if time_scale is not None:
        sc = sc.scaled(time_scale)
    options.setdefault("log_to_stderr", False)
    backend = TwinBackend(sc, truth_file)
    if switch_to is not None:
        then = switch_to if isinstance(switch_to, Scenario) else load_scenario(switch_to)
        backend = SwitchingTwinBackend(sc, then, switch_after, truth_file)
    return run_server(backend, ServeOptions(**options), host, port)
