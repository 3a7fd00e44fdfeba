"""llama.cpp's real server (xllamacpp) in three speculation modes, checked over plain HTTP.

These pin down the facts specscope's probe and telemetry rely on, straight from the server:
per-request `timings.draft_n/draft_n_accepted` equal the `/metrics` `llamacpp:spec_decode_*`
deltas; every verify step commits 1 + accepted tokens; streaming sends one event per token.
Real weights, real server on 127.0.0.1; no mocks. Bounded: short generations, one server per mode.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import LLAMACPP_THREADS as THREADS
from conftest import PEER_MODELS_DIR as MODELS_DIR
from conftest import import_peer_module, metric_delta, peer_unavailable, scrape_prometheus

import_peer_module("xllamacpp")

from specscope.peers.llamacpp import MODES, LlamaCppServer, PeerServerError  # noqa: E402
from specscope.peers.models import PeerModelError, ensure_peer_models  # noqa: E402

pytestmark = [pytest.mark.peer, pytest.mark.timeout(240)]

# Real code that repeats itself as code does (one getter after another), so that n-gram lookup
# finds something to draft from: SmolLM2 goes on writing getters of the same shape.
PROMPT = (Path(__file__).parent / "fixtures" / "prompts" / "code_config.txt").read_text()
N_PREDICT = 48


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def models_ready() -> Path:
    try:
        ensure_peer_models(MODELS_DIR, log=lambda _line: None)
    except PeerModelError as exc:
        peer_unavailable(str(exc))
    return MODELS_DIR


@pytest.fixture(scope="module", params=MODES)
def server(request: pytest.FixtureRequest, models_ready: Path) -> Iterator[LlamaCppServer]:
    with LlamaCppServer(request.param, models_dir=models_ready, threads=THREADS) as srv:
        yield srv


def test_timings_agree_with_metrics_and_steps_commit_one_plus_accepted(
    server: LlamaCppServer,
) -> None:
    before = scrape_prometheus(server.url)
    reply = _post(
        f"{server.url}/completion",
        {"prompt": PROMPT, "n_predict": N_PREDICT, "temperature": 0, "ignore_eos": True},
    )
    after = scrape_prometheus(server.url)
    timings = reply["timings"]
    predicted = timings["predicted_n"]
    assert predicted == N_PREDICT
    assert metric_delta(before, after, "llamacpp:tokens_predicted_total") == predicted

    drafted = metric_delta(before, after, "llamacpp:spec_decode_num_draft_tokens_total")
    accepted = metric_delta(before, after, "llamacpp:spec_decode_num_accepted_tokens_total")
    drafts = metric_delta(before, after, "llamacpp:spec_decode_num_drafts_total")
    per_pos = [
        metric_delta(
            before,
            after,
            f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}}',
        )
        for i in range(8)
    ]
    # n_decode counts target decode calls: one for the prompt batch, then one per verify step.
    steps = metric_delta(before, after, "llamacpp:n_decode_total") - 1

    if server.mode == "none":
        assert "draft_n" not in timings  # the server omits the fields when nothing was drafted
        assert drafted == accepted == drafts == 0
        assert steps == predicted - 1  # plain decoding: one token per step (the first from prefill)
        return

    assert timings["draft_n"] == drafted > 0
    assert timings["draft_n_accepted"] == accepted
    assert 0 < drafts <= steps
    assert sum(per_pos) == accepted
    assert per_pos == sorted(per_pos, reverse=True)  # acceptance at depth d needs all before it
    # Each verify step commits its accepted drafts plus one token of its own.
    assert steps + accepted == predicted - 1
    if server.mode == "draft":
        assert drafts == steps  # a draft model proposes at every step


def test_stream_sends_one_event_per_token(server: LlamaCppServer) -> None:
    req = urllib.request.Request(
        f"{server.url}/completion",
        data=json.dumps(
            {"prompt": PROMPT, "n_predict": N_PREDICT, "temperature": 0, "ignore_eos": True,
             "stream": True, "timings_per_token": True}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    events: list[dict] = []
    deadline = time.monotonic() + 120
    with urllib.request.urlopen(req, timeout=60) as response:
        for raw in response:
            assert time.monotonic() < deadline
            line = raw.decode().strip()
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
    token_events = [e for e in events if e.get("content")]
    final = events[-1]
    assert final["stop"] is True
    assert len(token_events) == final["timings"]["predicted_n"] == N_PREDICT
    if server.mode != "none":
        assert "draft_n" in final["timings"]


def test_exit_stops_the_server_and_frees_the_port(models_ready: Path) -> None:
    with LlamaCppServer("none", models_dir=models_ready, threads=THREADS) as srv:
        url, proc = srv.url, srv.process
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
            assert response.status == 200
        log = srv.log_path
        assert log.is_file()
    assert proc is not None and proc.returncode is not None
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}/health", timeout=5)
    assert not log.exists()  # the temporary log folder is removed with the server


def test_missing_models_fail_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(PeerModelError, match="make peer-models"):
        LlamaCppServer("draft", models_dir=tmp_path).start()


def test_a_server_that_dies_at_startup_is_reported_with_its_log(tmp_path: Path) -> None:
    bogus = tmp_path / "models"
    bogus.mkdir()
    (bogus / "SmolLM2-135M-Instruct.F16.gguf").write_bytes(b"not a gguf")
    server = LlamaCppServer("none", models_dir=bogus, start_timeout_s=60)
    with pytest.raises(PeerServerError, match=r"exited with .*log"), server:
        pass
    assert server.process is None  # stopped and reaped even though start failed


def _launcher(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specscope.peers.llamacpp", "--threads", str(THREADS), *args],
        capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_launcher_runs_a_command_against_the_server_and_returns_its_status(
    models_ready: Path,
) -> None:
    check = (
        "import sys, urllib.request;"
        "ok = urllib.request.urlopen(sys.argv[1] + '/health', timeout=10).status == 200;"
        "sys.exit(7 if ok and sys.argv[2].endswith('.log') else 3)"
    )
    done = _launcher(
        "--mode", "none", "--models", str(models_ready), "--",
        sys.executable, "-c", check, "{url}", "{log}",
    )  # fmt: skip
    assert done.returncode == 7, done.stderr[-1000:]
    assert "running:" in done.stderr


def test_launcher_names_a_missing_command_in_one_line(models_ready: Path) -> None:
    done = _launcher("--mode", "none", "--models", str(models_ready), "--", "no-such-cmd-xyz")
    assert done.returncode == 2
    assert "command not found: no-such-cmd-xyz" in done.stderr
    assert "Traceback" not in done.stderr
