"""`probe --workload`: categories travel with each request and into the summary; FILE
workloads go out as text or chat messages; bad workloads are one line and exit 2."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from specscope.analysis.steps.reconstruct import reconstruct_steps
from specscope.cli import app
from specscope.trace import load_run
from support.loopback import LoopbackServer, Schedule, openai_app, word_tokens

runner = CliRunner()


def _probe(url, tmp_path, *extra):
    return runner.invoke(
        app,
        [
            "probe",
            url,
            "--json",
            "--out",
            str(tmp_path / "run"),
            "--prompt-tokens",
            "60",
            "--max-tokens",
            "16",
            *extra,
        ],
    )


def test_mixed_workload_categories_per_request_and_table(tmp_path):
    with LoopbackServer(openai_app(Schedule(), spec_metrics=None)) as srv:
        res = _probe(srv.url, tmp_path, "--flavor", "vllm", "--repeat", "7")
        prompts = [b["prompt"] for b in srv.posts("/v1/completions")]
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    s = out["summary"]
    cats = [r["category"] for r in s["by_category"]]
    assert cats == [
        "long-writing",
        "reasoning",
        "chat",
        "summarisation",
        "multi-turn",
        "code-completion",
        "code-edit",
    ]
    # 16 tokens: the first from prefill, then steps 3, 2, 4, 1, 3 and a last one capped at 2;
    # on a loaded machine a request's events may not be its steps (a late read holds two): its
    # category then has no commit length (no server figure here), and its steps say why
    run = load_run(tmp_path / "run")
    assert [r.spec.category for r in run.requests] == cats
    recs = {r.spec.category: reconstruct_steps(r) for r in run.requests}
    assert all(r["requests"] == 1 for r in s["by_category"])
    exact = [r for r in s["by_category"] if r["mean_commit_len"] is not None]
    assert exact and all(r["mean_commit_len"] == 15 / 6 for r in exact)
    assert all(r["commit_source"] == "client" for r in exact)
    for r in s["by_category"]:
        if r["mean_commit_len"] is None:
            assert not recs[r["category"]].reliable and recs[r["category"]].reason
    assert s["prefix_cache"]["hits"] == 0 and s["repetition_loops"] == []
    assert len(set(prompts)) == 7 and all(len(word_tokens(p)) == 60 for p in prompts)
    assert run.info.args["workload"] == "mixed"
    assert any("every prompt unique" in n for n in out["notes"])


def test_file_workload_sends_messages_on_chat(tmp_path):
    f = tmp_path / "w.jsonl"
    f.write_text(
        json.dumps(
            {"messages": [{"role": "user", "content": "Why is the sky blue?"}], "category": "qa"}
        )
        + "\n"
    )
    with LoopbackServer(openai_app(Schedule(commits=[1] * 4), spec_metrics=None)) as srv:
        res = _probe(
            srv.url,
            tmp_path,
            "--flavor",
            "vllm",
            "--api",
            "chat",
            "--workload",
            str(f),
            "--repeat",
            "2",
        )
        bodies = srv.posts("/v1/chat/completions")
    assert res.exit_code == 0, res.output
    msgs = [b["messages"] for b in bodies]
    assert all(m[0]["content"].endswith("\nWhy is the sky blue?") for m in msgs)
    assert msgs[0] != msgs[1]  # unique per request
    assert json.loads(res.stdout)["summary"]["by_category"][0]["category"] == "qa"


def test_bad_workloads_exit_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n')
    for extra in (
        ["--workload", str(bad)],
        ["--workload", "nope"],
        ["--workload", "chat", "--prompt-file", str(bad)],
    ):
        res = runner.invoke(app, ["probe", "http://127.0.0.1:9", *extra])
        assert res.exit_code == 2, res.output
        assert "Traceback" not in res.output
    res = runner.invoke(app, ["probe", "http://127.0.0.1:9", "--workload", str(bad)])
    assert "line 2: not valid JSON" in " ".join(res.output.split())  # rich may wrap the line
    res = runner.invoke(app, ["diagnose", "http://127.0.0.1:9", "--workload", "nope"])
    assert res.exit_code == 2 and "neither a built-in workload" in " ".join(res.output.split())
