"""`specscope probe URL --json` against loopback servers of each flavor on a known schedule.

Tolerances: the servers sleep one step between chunks, so measured rates can only be lower than
the schedule's, by the machine's scheduling jitter; on a loaded 2-core machine we allow -35% (and
+8% for timer granularity), and step times up to 1.75x the schedule.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specscope.cli import app
from specscope.trace import load_run
from support.loopback import (
    LoopbackServer,
    Schedule,
    free_port,
    llamacpp_app,
    openai_app,
    sglang_app,
)

runner = CliRunner()

CONTRACT_KEYS = ("requests", "errors", "ttft_s_p50", "decode_tps", "mean_commit_len", "mean_step_s")


def probe_json(url: str, tmp_path, *extra: str) -> tuple[int, dict]:
    res = runner.invoke(
        app,
        [
            "probe",
            url,
            "--json",
            "--out",
            str(tmp_path / "run"),
            "--prompt-tokens",
            "12",
            "--max-tokens",
            "64",
            *extra,
        ],
    )
    assert res.stdout.strip(), res.output
    return res.exit_code, json.loads(res.stdout)


def assert_rate(measured: float, expected: float) -> None:
    assert expected * 0.65 <= measured <= expected * 1.08, (measured, expected)


@pytest.mark.parametrize("old_names", [False, True])
def test_sglang_native_per_step_chunks(tmp_path, old_names):
    sched = Schedule()
    with LoopbackServer(sglang_app(sched, old_names=old_names)) as srv:
        code, out = probe_json(srv.url, tmp_path, "--repeat", "2")
    s = out["summary"]
    assert code == 0, out
    for k in CONTRACT_KEYS:
        assert k in s
    assert out["flavor"] == "sglang" and out["api"] == "native"
    assert s["requests"] == 2 and s["errors"] == 0
    assert_rate(s["decode_tps"], sched.decode_tps)
    # The client's reliable steps come first (ARCHITECTURE §4.1): the verify steps' own mean.
    # Where a loaded machine merged reads, the server's completion_tokens / spec_verify_ct
    # (the prefill token included, as SGLang does) is next.
    if s["steps"]["reliable_requests"] == 2:
        # exact, unless a loaded machine merged one read of two steps (tolerated as a note by
        # analysis.steps: 1 of 32 steps moves the mean by ~3%)
        assert s["mean_commit_len"] == pytest.approx(sched.mean_commit, rel=0.04)
        assert s["mean_commit_len_source"] == "client"
    else:
        assert s["mean_commit_len"] == pytest.approx(
            sched.completion_tokens / len(sched.commits), rel=1e-3
        )
        assert s["mean_commit_len_source"] == "server"
    assert sched.step_s * 0.92 <= s["mean_step_s"] <= sched.step_s * 1.75
    assert s["mean_step_s_source"] == "client"
    assert 0.04 <= s["ttft_s_p50"] <= 0.5
    assert s["token_count_sources"] == {"meta_info": 2}
    # The request asked for ignore_eos and a stream, with the exact prompt length.
    body = srv.posts("/generate")[0]
    assert body["stream"] is True and body["sampling_params"]["ignore_eos"] is True
    assert body["sampling_params"]["max_new_tokens"] == 64
    run = load_run(tmp_path / "run")
    assert run.info.flavor == "sglang" and run.info.status == "complete"
    assert [r.spec.prompt_tokens for r in run.requests] == [12, 12]
    assert run.requests[0].spec.prompt != run.requests[1].spec.prompt  # varied per request
    f = run.requests[0].server_spec
    assert f is not None and f.verify_ct == len(sched.commits)
    assert f.accepted_drafts == sum(c - 1 for c in sched.commits)
    assert f.accept_histogram is not None and sum(f.accept_histogram) == len(sched.commits)


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_vllm_usage_deltas_and_detailed_metrics(tmp_path, api):
    sched = Schedule()
    with LoopbackServer(openai_app(sched)) as srv:
        code, out = probe_json(srv.url, tmp_path, "--api", api)
    s = out["summary"]
    assert code == 0, out
    assert out["flavor"] == "vllm" and out["model"] == "test-model"
    assert_rate(s["decode_tps"], sched.decode_tps)
    # per_step_accepted wins: mean commit = mean(accepted + 1) over the decode steps.
    assert s["mean_commit_len"] == pytest.approx(sched.mean_commit, rel=1e-6)
    assert s["steps"]["methods"] == {"server": 1}
    assert s["steps"]["cross_checks"][0]["result"].startswith("client steps agree")
    assert s["token_count_sources"] == {"usage": 1}
    assert sched.step_s * 0.92 <= s["mean_step_s"] <= sched.step_s * 1.75
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    body = srv.posts(path)[0]
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["ignore_eos"] is True and body["model"] == "test-model"


def test_vllm_summary_metrics_without_per_step(tmp_path):
    sched = Schedule()
    with LoopbackServer(openai_app(sched, spec_metrics="summary")) as srv:
        code, out = probe_json(srv.url, tmp_path)
    s = out["summary"]
    assert code == 0
    # vLLM's own mean_acceptance_length = 1 + accepted / drafts (drafted steps only; here
    # every step drafted), beside the client's all-steps figure, which comes first.
    assert s["mean_commit_len"] == pytest.approx(sched.mean_commit, rel=1e-6)
    assert s["mean_commit_len_source"] == "client"
    assert s["mean_commit_len_per_drafted_step"] == pytest.approx(sched.mean_commit, rel=1e-6)
    assert s["steps"]["methods"] == {"chunk": 1}
    assert s["server_spec"]["accepted_drafts"] == sum(c - 1 for c in sched.commits)


def test_openai_rejecting_stream_options_falls_back_to_logprobs(tmp_path):
    sched = Schedule()
    with LoopbackServer(
        openai_app(
            sched, owner="openai", spec_metrics=None, reject_stream_options=True, version=False
        )
    ) as srv:
        code, out = probe_json(srv.url, tmp_path, "--repeat", "2")
        bodies = srv.posts("/v1/completions")
    s = out["summary"]
    assert code == 0, out
    assert out["flavor"] == "openai"
    # First request: 400 twice (two rungs with stream_options), then logprobs without them;
    # the second request starts from the rung that worked.
    assert ["stream_options" in b for b in bodies] == [True, True, False, False]
    assert bodies[2]["logprobs"] == 1
    assert s["token_count_sources"] == {"logprobs": 2}
    assert_rate(s["decode_tps"], sched.decode_tps)
    # No server spec fields: client chunk steps (one chunk per step) give the commit length.
    assert s["mean_commit_len_source"] == "client"
    assert s["mean_commit_len"] == pytest.approx(sched.mean_commit, rel=1e-6)


def test_llamacpp_per_token_bursts(tmp_path):
    # 150 ms steps: with two CPU-bound processes beside the suite a client read came more than
    # 60 ms late and merged two steps' bursts (issue #33); the client then rightly fell back to
    # the server's figure, but this test is about the bursts
    sched = Schedule(step_s=0.15)
    with LoopbackServer(llamacpp_app(sched)) as srv:
        code, out = probe_json(srv.url, tmp_path)
        body = srv.posts("/completion")[0]
    s = out["summary"]
    assert code == 0, out
    assert out["flavor"] == "llamacpp" and out["api"] == "native"
    assert body["n_predict"] == 64 and body["ignore_eos"] is True and body["stream"] is True
    assert s["token_count_sources"] == {"events": 1}
    assert s["steps"]["methods"] == {"burst": 1}
    if s["steps"]["reliable_requests"] == 0:
        # a read more than a step late merged two steps' bursts (a loaded machine: three
        # workers and the fault lab's engine servers on two cores): the client says why it
        # cannot trust its bursts and takes the server's all-steps figure, the truth here
        [why] = s["steps"]["unreliable_reasons"]
        assert "burst" in why["reason"], why
        assert s["mean_commit_len_source"] != "client"
        assert s["mean_commit_len"] == pytest.approx(sched.mean_commit, rel=1e-6)
        return
    # timings give predicted_n and draft_n_accepted: the server's all-steps commit length
    # ((predicted_n - 1) / (predicted_n - 1 - accepted)), which the bursts must agree with;
    # the agreeing bursts are the client's all-steps reconstruction, which comes first
    assert s["mean_commit_len_source"] == "client"
    assert s["mean_commit_len"] == pytest.approx(sched.mean_commit, rel=1e-6)
    assert s["server_spec"]["verify_ct"] == len(sched.commits)
    [check] = s["steps"]["cross_checks"]
    assert check["result"].endswith("(agree)") and check["requests"] == 1
    assert sched.step_s * 0.92 <= s["mean_step_s"] <= sched.step_s * 1.75
    assert_rate(s["decode_tps"], sched.decode_tps)
    assert s["server_spec"]["proposed_drafts"] == len(sched.commits) * sched.max_drafts
    run = load_run(tmp_path / "run")
    assert run.requests[0].completion_tokens == sched.completion_tokens


def test_flavor_override_and_concurrency(tmp_path):
    sched = Schedule(commits=[2] * 6)
    with LoopbackServer(openai_app(sched, spec_metrics=None)) as srv:
        code, out = probe_json(
            srv.url,
            tmp_path,
            "--flavor",
            "openai",
            "--concurrency",
            "3",
            "--repeat",
            "2",
            "--same-prompt",
        )
        prompts = [b["prompt"] for b in srv.posts("/v1/completions")]
    assert code == 0
    assert out["flavor"] == "openai" and out["summary"]["requests"] == 6
    assert len(set(prompts)) == 1
    run = load_run(tmp_path / "run")
    assert sorted(r.index for r in run.requests) == list(range(6))
    assert {r.concurrency_slot for r in run.requests} == {0, 1, 2}


def test_api_key_sent_but_never_written(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_API_KEY", "sk-secret-123")
    with LoopbackServer(openai_app(Schedule(commits=[1, 1]))) as srv:
        code, _ = probe_json(srv.url, tmp_path)
        auth = [h.get("Authorization") for h in srv.headers]
    assert code == 0
    assert "Bearer sk-secret-123" in auth
    for f in (tmp_path / "run").iterdir():
        assert "sk-secret-123" not in f.read_text()
    res = runner.invoke(
        app, ["probe", srv.url, "--api-key", "sk-flag-456", "--json", "--out", str(tmp_path / "r2")]
    )
    assert "sk-flag-456" not in res.stdout
    for f in (tmp_path / "r2").iterdir():
        assert "sk-flag-456" not in f.read_text()


def test_table_output_without_json(tmp_path):
    with LoopbackServer(sglang_app(Schedule(commits=[2, 3]))) as srv:
        res = runner.invoke(
            app,
            [
                "probe",
                srv.url,
                "--out",
                str(tmp_path / "run"),
                "--prompt-tokens",
                "5",
                "--max-tokens",
                "6",
            ],
        )
    assert res.exit_code == 0, res.output
    assert "decode tok/s" in res.stdout and "mean commit length" in res.stdout


def test_unreachable_server_is_exit_1_with_recorded_error(tmp_path):
    code, out = probe_json(f"http://127.0.0.1:{free_port()}", tmp_path)
    assert code == 1
    assert out["summary"]["requests"] == 1 and out["summary"]["errors"] == 1
    assert out["failed_requests"][0]["kind"] == "connection"
    run = load_run(tmp_path / "run")
    assert run.info.status == "failed" and run.requests[0].error is not None


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["probe", "not-a-url"], "URL"),
        (["probe", "http://127.0.0.1:1", "--flavor", "tgi"], "--flavor"),
        (["probe", "http://127.0.0.1:1", "--api", "grpc"], "--api"),
        (["probe", "http://127.0.0.1:1", "--concurrency", "0"], "--concurrency"),
        (["probe", "http://127.0.0.1:1", "--timeout-total", "0"], "--timeout-total"),
        (["probe", "http://127.0.0.1:1", "--tokenizer", "/nonexistent/tok.json"], "tokenizer"),
        (["probe", "http://127.0.0.1:1", "--prompt-file", "/nonexistent.txt"], "--prompt-file"),
    ],
)
def test_bad_usage_exit_2(argv, needle):
    res = runner.invoke(app, argv)
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert "Traceback" not in res.output


def test_no_tokenize_endpoint_asks_for_tokenizer(tmp_path):
    with LoopbackServer(
        openai_app(Schedule(), tokenize=False, owner="openai", version=False)
    ) as srv:
        res = runner.invoke(app, ["probe", srv.url, "--out", str(tmp_path / "run")])
    assert res.exit_code == 2
    assert "--tokenizer" in res.output and "Traceback" not in res.output


def test_prompt_file_and_local_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {
        "[UNK]": 0,
        "tok": 1,
        **{
            w: i + 2
            for i, w in enumerate(
                ["the", "river", "light", "water", "stone", "green", "house", "world"]
            )
        },
    }
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok_path = tmp_path / "tokenizer.json"
    tok.save(str(tok_path))
    (tmp_path / "p.txt").write_text("the river light")
    sched = Schedule(commits=[2, 2, 2])
    with LoopbackServer(
        openai_app(
            sched,
            tokenize=False,
            owner="openai",
            version=False,
            reject_stream_options=True,
            spec_metrics=None,
        )
    ) as srv:
        # No tokenize endpoint, no usage, no logprobs on the last rung: the local tokenizer
        # counts prompt and streamed text.
        code, out = probe_json(
            srv.url,
            tmp_path,
            "--tokenizer",
            str(tok_path),
            "--prompt-file",
            str(tmp_path / "p.txt"),
        )
    assert code == 0, out
    run = load_run(tmp_path / "run")
    spec = run.requests[0].spec
    # The file's text after a per-run reference line (unique prompts unless --same-prompt).
    assert spec.prompt.endswith("\nthe river light") and spec.prompt.startswith("[")
    assert spec.prompt_tokens == len(tok.encode(spec.prompt).ids)
