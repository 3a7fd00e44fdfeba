"""Shared fixtures: the twin behind a real HTTP server on 127.0.0.1 (twin/server.py).

    def test_x(twin_server):
        srv = twin_server("seed-regression", time_scale=0.05, decode_log_interval=5)
        ... srv.url ..., srv.backend.truth(request_id) ...

`twin_server(scenario, *, time_scale=None, truth_file=None, **serve_options)` starts one server per
call (a free port each) and stops them all after the test. `scenario` is a shipped name
("healthy", "seed-regression", "draft-window", "coalescing", "speculation-overhead",
"speculation-overhead:baseline"), a TOML path, or a Scenario object. serve_options are
ServeOptions fields: stream_interval, per_token_events, decode_log_interval, log_file,
log_to_stderr (default False here), step_log, max_batch, served_model_name.

`twin_url` is a ready healthy twin at time_scale 0.1 (one per test); `fast_scenario` is a
Scenario for timing-sensitive tests: fixed acceptance, steps of ~30 ms, no drift.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from specscope.serve.runner import ServerHandle
from specscope.twin.model import Scenario, load_scenario
from specscope.twin.server import start_twin_server


@pytest.fixture
def twin_server() -> Iterator[Callable[..., ServerHandle]]:
    handles: list[ServerHandle] = []

    def start(scenario: Any = "healthy", **kwargs: Any) -> ServerHandle:
        handle = start_twin_server(scenario, **kwargs)
        handles.append(handle)
        return handle

    yield start
    for h in handles:
        h.stop()


@pytest.fixture
def twin_url(twin_server: Callable[..., ServerHandle]) -> str:
    return twin_server("healthy", time_scale=0.1).url


@pytest.fixture
def fast_scenario() -> Scenario:
    """Steps of ~30 ms (long enough to time on a loaded 2-core machine), fixed acceptance."""
    base = load_scenario("healthy")
    data = base.model_dump()
    data["name"] = "fast-test"
    data["step"].update(s0=0.03, per_context_token=0.0, per_verified_token=0.0,
                        per_batch_request=0.002, drift_per_output_token=0.0, noise_sigma=0.1)
    data["prefill"].update(s0=0.005, per_prompt_token=0.0)
    data["acceptance"].update(depth_probs=[0.9, 0.8, 0.7, 0.6, 0.5])
    return Scenario.model_validate(data)


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (`pytest.mark.anyio`) run on asyncio (anyio's pytest plugin)."""
    return "asyncio"
