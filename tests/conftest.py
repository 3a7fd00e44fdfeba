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

Real peers (llama.cpp, vLLM) are the only evidence from real servers, so they must not drop out
unseen: `peer_unavailable(reason)` skips where a developer lacks one, but fails the run in CI
(`CI=true`); `import_peer_module(name)` is `pytest.importorskip` with the same rule.
`scrape_prometheus(url)` reads a peer's /metrics; `run_specscope(...)` runs the CLI as a user would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, NoReturn

import pytest

from specscope.serve.runner import ServerHandle
from specscope.twin.model import Scenario, load_scenario
from specscope.twin.server import start_twin_server


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def peer_unavailable(reason: str) -> NoReturn:
    """A real peer cannot be built or started: skip locally, fail in CI."""
    if in_ci():
        pytest.fail(f"real peer unavailable in CI (CI=true): {reason}", pytrace=False)
    pytest.skip(reason)


def import_peer_module(name: str) -> ModuleType:
    """Import what a peer needs (e.g. xllamacpp); a missing one is `peer_unavailable`."""
    try:
        return __import__(name)
    except ImportError as exc:
        peer_unavailable(f"could not import {name!r}: {exc}")


def scrape_prometheus(url: str, timeout_s: float = 30.0) -> dict[str, float]:
    """Every sample of `{url}/metrics`, keyed `name{label="v",...}` (labels sorted; bare name
    when it has none)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=timeout_s) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return samples


def metric_total(samples: dict[str, float], name: str) -> float:
    """The sum of `name` over all its label sets (0 when absent)."""
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


def metric_delta(before: dict[str, float], after: dict[str, float], name: str) -> float:
    """How much `name` (summed over label sets) grew between two scrapes."""
    return metric_total(after, name) - metric_total(before, name)


def run_specscope(*args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    """`specscope ARGS...` in a child process (this interpreter), output captured."""
    return subprocess.run(
        [sys.executable, "-m", "specscope.cli", *args],
        capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
    )  # fmt: skip


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
