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
`scrape_prometheus(url)` reads a peer's /metrics; tests/support/cli.py runs the CLI as a user would.

`make test` runs the suite on several pytest-xdist workers, one module per worker at a time (a
module's servers start once); the modules that time a real server or compare two runs' speed
(TIMED_MODULES) share one lane, one after another, and the other lanes yield the CPU to it.
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from specscope.serve.runner import ServerHandle
from specscope.twin.scenario import Scenario, load_scenario
from specscope.twin.server import start_twin_server

if TYPE_CHECKING:
    from specscope.peers.llamacpp import LlamaCppServer


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


# The modules whose verdicts rest on timing a niced, starved process cannot give: those that
# compare our client's timing with a real server's own counts (one burst of events per verify
# step, TPOT within a few %; on two cores, two of them side by side merge events and fail), the
# diagnosis against a baseline run (a tps ratio between two runs, one after the other), and the
# fault lab (a diagnosis of our engine as a user runs it: niced beside two busy processes, its
# diagnoses outlasted 25 minutes). Under xdist they share one lane, one module after another.
TIMED_MODULES = frozenset(
    {
        "tests/test_fault_lab.py",
        "tests/test_peer_cli.py",
        "tests/test_peer_serving.py",
        "tests/test_peer_vllm.py",
        "tests/test_probe_peer.py",
        "tests/test_diagnose_baseline.py",
        # the workers' truth checks hold the step time to 1%: a starved core moves it
        "tests/test_probe_workers.py",
        "tests/test_probe_ray.py",
        # the watch learns the twin's step time in a warm-up and alerts on a rise: a core
        # starved mid-run reads as one (an alert before the switch fails the test)
        "tests/test_watch_twin.py",
        # the precision loops stop when the spread of the measured rate between requests is
        # small enough within a budget: at nice 10 beside the lane's vLLM, stalls of seconds
        # spread a 30 ms-step twin's per-request rates 2-3x (stop 56's CI: +-68% after 45
        # requests, stopped by the 60 s budget where +-20% was asked)
        "tests/test_probe_precision.py",
        "tests/test_diagnose_precision.py",
        "tests/test_precision_loop.py",
    }
)
TIMED_LANE = "timed"
# How much lower the rest of the suite runs beside that lane (a nice level).
OTHER_LANES_NICE = 10
REPO = Path(__file__).resolve().parents[1]
VLLM_PEER_ROOT = REPO / ".cache" / "peer-vllm"
# llama.cpp's target/draft pair (`make peer-models`), served on one decode thread: with two,
# llama.cpp's spin barriers make a shared, busy machine ~20x slower.
PEER_MODELS_DIR = REPO / ".cache" / "peer-models"
LLAMACPP_THREADS = 1
# vLLM's own choice (one compute thread on 2 cores): with both cores, the worker's OpenMP
# barriers stall whenever the client or another process takes a core (plain decoding measured
# 1.4-4.5 tok/s on a loaded machine, against 21-30 idle).
VLLM_CPU_BIND = "auto"


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The timed modules first (the order inside a module kept), so that under xdist one
    worker takes their lane before it runs anything else: the longest work starts at once."""
    items.sort(key=lambda item: _module(item.nodeid) not in TIMED_MODULES)  # stable


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest without xdist leaves it unknown
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` with the timed modules as one unit of work (xdist's own
    `xdist_group` marks do not group on pytest 9.2, which no longer reads `item._nodeid`)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class TimedLaneScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = _module(nodeid)
            return TIMED_LANE if module in TIMED_MODULES else module

    config.option.loadscopereorder = False  # keep the collection order: the lane first
    return TimedLaneScheduling(config, log)


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures, module-scoped servers included
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under xdist, a worker about to run anything but the timed lane lowers its priority
    (and that of the servers and CLIs it starts), so that the lane's server and client get a core
    when they need one. Niceness only goes up: a worker that has yielded stays so."""
    if "PYTEST_XDIST_WORKER" not in os.environ or _module(item.nodeid) in TIMED_MODULES:
        return
    if os.nice(0) < OTHER_LANES_NICE:
        os.nice(OTHER_LANES_NICE - os.nice(0))


def llamacpp_servers(base: Path) -> Iterator[LlamaCppServer]:
    """llama.cpp's server in each mode (none, draft, ngram), one after another, its log under
    `base`; the peer models are made first (`make peer-models`), or it is `peer_unavailable`."""
    from specscope.peers.llamacpp import MODES, LlamaCppServer
    from specscope.peers.models import PeerModelError, ensure_peer_models

    try:
        ensure_peer_models(PEER_MODELS_DIR, log=lambda _line: None)
    except PeerModelError as exc:
        peer_unavailable(str(exc))
    for mode in MODES:
        log_path = base / f"{mode}-llama-server.log"
        with LlamaCppServer(
            mode, models_dir=PEER_MODELS_DIR, log_path=log_path, threads=LLAMACPP_THREADS
        ) as srv:
            yield srv


@pytest.fixture(scope="session")
def vllm_peer_root() -> Path:
    """The vLLM peer's install (`make peer-vllm`); missing, it is `peer_unavailable`."""
    from specscope.peers.vllm_install import VllmInstallError, installed_peer

    try:
        installed_peer(VLLM_PEER_ROOT)
    except VllmInstallError as exc:
        peer_unavailable(str(exc))
    return VLLM_PEER_ROOT


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
    data["step"].update(
        s0=0.03,
        per_context_token=0.0,
        per_verified_token=0.0,
        per_batch_request=0.002,
        drift_per_output_token=0.0,
        noise_sigma=0.1,
    )
    data["prefill"].update(s0=0.005, per_prompt_token=0.0)
    data["acceptance"].update(depth_probs=[0.9, 0.8, 0.7, 0.6, 0.5])
    return Scenario.model_validate(data)


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (`pytest.mark.anyio`) run on asyncio (anyio's pytest plugin)."""
    return "asyncio"
