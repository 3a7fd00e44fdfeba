"""The preflight (probe/preflight.py): a URL whose server answers but is not an OpenAI-compatible
one is said as such, in one line, exit 2, by probe and diagnose alike, with no run directory;
`URL/v1` is `URL`; a server that does not answer keeps exit 1 and a failed run (issue #36)."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from specscope.probe.client import Timeouts, new_session
from specscope.probe.endpoint import parse_endpoint, strip_api_suffix
from specscope.probe.preflight import NotOpenAIServer, Preflight, preflight
from specscope.trace import load_run
from support.diagnose import cli, specscope
from support.loopback import LoopbackServer, Schedule, free_port, models_handler, openai_app


def _check(url: str) -> Preflight:
    async def go() -> Preflight:
        async with new_session(Timeouts(connect=2.0)) as session:
            return await preflight(session, url, timeout_s=5.0)

    return asyncio.run(go())


@pytest.mark.parametrize(
    "given, base",
    [
        ("http://h:1", "http://h:1"),
        ("http://h:1/", "http://h:1"),
        ("http://h:1/v1", "http://h:1"),
        ("http://h:1/v1/", "http://h:1"),
        ("http://h:1/proxy/v1", "http://h:1/proxy"),
        ("http://h:1/v10", "http://h:1/v10"),
    ],
)
def test_a_trailing_v1_is_the_same_server(given, base):
    assert strip_api_suffix(given) == base
    assert parse_endpoint(given).url == base


def test_404_on_models_is_not_an_openai_server():
    with LoopbackServer(web.Application()) as s, pytest.raises(NotOpenAIServer) as e:
        _check(s.url + "/v1")
    assert str(e.value) == f"not an OpenAI-compatible server (HTTP 404 on {s.url}/v1/models)"


@pytest.mark.parametrize(
    "body, content_type, why",
    [
        ("<html>hello</html>", "text/html", "text/html that is not JSON"),
        ('{"models": []}', "application/json", "JSON without a `data` model list"),
    ],
)
def test_an_answer_that_is_no_model_list_is_not_an_openai_server(body, content_type, why):
    app = web.Application()
    app.router.add_get("/v1/models", lambda _r: web.Response(text=body, content_type=content_type))
    with LoopbackServer(app) as s, pytest.raises(NotOpenAIServer) as e:
        _check(s.url)
    assert str(e.value) == (
        f"not an OpenAI-compatible server (HTTP 200, {why} on {s.url}/v1/models)"
    )
    assert "\n" not in str(e.value)


def test_a_model_list_or_a_native_info_endpoint_passes():
    app = web.Application()
    app.router.add_get("/v1/models", models_handler("vllm"))
    with LoopbackServer(app) as s:
        assert _check(s.url) == Preflight(True, 200)
    native = web.Application()  # llama.cpp-like without /v1/models: its /props answers
    native.router.add_get("/props", lambda _r: web.json_response({"total_slots": 1}))
    with LoopbackServer(native) as s:
        assert _check(s.url).reachable


def test_no_answer_is_not_a_preflight_failure():
    url = f"http://127.0.0.1:{free_port()}"
    got = _check(url)
    assert not got.reachable and got.error is not None and got.error.startswith(url)


def test_the_twin_and_the_embedded_default_serve_models(twin_server, tmp_path):
    from specscope.embedded import embedded_server

    assert _check(twin_server("healthy", time_scale=0.1).url + "/v1").reachable
    with embedded_server(backend="twin", log_file=tmp_path / "server.log") as server:
        assert _check(server.url).reachable


@pytest.mark.parametrize("suffix", ["", "/v1", "/v1/"])
@pytest.mark.parametrize("command", ["probe", "diagnose"])
def test_not_an_llm_server_is_one_line_exit_2_and_no_run_dir(tmp_path, command, suffix):
    out = tmp_path / "run"
    with LoopbackServer(web.Application()) as s:
        res = cli(command, s.url + suffix, "--out", str(out), home=tmp_path / "home")
    assert res.exit_code == 2, res.stderr
    assert res.stderr.strip() == (
        f"error: not an OpenAI-compatible server (HTTP 404 on {s.url}/v1/models)"
    )
    assert not out.exists()
    assert not (tmp_path / "home").exists() or not any(
        p.is_dir() for p in (tmp_path / "home").iterdir()
    )


def test_diagnose_json_says_it_in_the_failure_object(tmp_path):
    # the console script itself (not the in-process runner): it is what turns --json errors
    # into objects, and stdout must hold exactly one
    with LoopbackServer(web.Application()) as s:
        res = specscope("diagnose", s.url, "--json", "--out", str(tmp_path / "run"), home=tmp_path)
    assert res.returncode == 2
    obj = json.loads(res.stdout)
    assert obj["error"] == f"not an OpenAI-compatible server (HTTP 404 on {s.url}/v1/models)"
    assert obj["decode_tps"] is None and obj["findings"] == []


def test_url_with_v1_probes_like_url(tmp_path):
    with LoopbackServer(openai_app(Schedule(commits=[2, 2]))) as s:
        res = cli(
            "probe",
            s.url + "/v1",
            "--json",
            "--out",
            str(tmp_path / "run"),
            "--prompt-tokens",
            "12",
            "--max-tokens",
            "5",
            home=tmp_path,
        )
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["endpoint"] == s.url
    run = load_run(tmp_path / "run")
    assert run.info.endpoint == s.url and run.info.status == "complete"


def test_refused_port_is_exit_1_a_failed_run_and_runs_lists_it_failed(tmp_path):
    home = tmp_path / "home"
    res = cli("probe", f"http://127.0.0.1:{free_port()}", "--out", str(home / "dead"), home=home)
    assert res.exit_code == 1, res.stderr
    assert "not an OpenAI-compatible" not in res.stderr and "not reachable" in res.stderr
    run = load_run(home / "dead")
    assert run.info.status == "failed" and run.requests[0].error is not None
    listed = cli("runs", "--json", home=home)
    assert listed.exit_code == 0, listed.stderr
    rows = json.loads(listed.stdout)["runs"]
    assert [(r["run_id"], r["status"]) for r in rows] == [(run.info.run_id, "failed")]
