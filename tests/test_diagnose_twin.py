"""`specscope diagnose` end to end: the real CLI (a subprocess) against the twin behind a real
HTTP server on 127.0.0.1, one scenario per story. Each run is bounded by the plan (a fixed
number of requests) and by the subprocess timeout; time_scale keeps the twin fast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.diagnose import (
    check_contract,
    cli,
    client_was_the_limit,
    diagnose_json,
    finding_ids,
    parse_page,
)

HOSTILE = "<script>alert(1)</script>"

# The long twin diagnoses keep the --precision repeats on (the default path) but bounded: what
# these tests check is decided by the plan's measurements, not by the extra repeats.
REPEAT_BUDGET_S = "6"
# A finding test needs the main experiments only: the mix's first category (the default's main
# prompts) without the seven-request workload mix, which the seed-regression test keeps.
MAIN_ONLY = ("--workload", "long-writing", "--budget-s", REPEAT_BUDGET_S)


@pytest.mark.slow
def test_seed_regression_embedded_default_finds_the_story(tmp_path):
    """No URL: the embedded twin (seed-regression) is started, diagnosed and stopped; its log
    and /metrics are read as server evidence."""
    out = tmp_path / "seed"
    obj, proc = diagnose_json(
        None,
        out,
        "--scenario",
        "seed-regression",
        "--time-scale",
        "0.3",
        "--prompt-tokens",
        "1000",
        "--max-tokens",
        "1000",
        "--budget-s",
        REPEAT_BUDGET_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_contract(obj)
    if client_was_the_limit(obj):
        return
    ids = finding_ids(obj)
    # The story's mechanisms are found; their consequence, the short window's bias, is found
    # on an idle machine, and on a loaded one (the twin's clock falling behind its schedule adds
    # noise of its own) at least tested and read in the story's direction.
    assert {"acceptance_decay", "step_time_drift"} <= set(ids), ids
    if "two_point_bias" not in ids:
        bias = next(t for t in obj["finding_tests"] if t["id"] == "two_point_bias")
        assert bias["effect"] is not None and bias["effect"] > 0, bias
    assert "chunk_coalescing" not in ids
    assert obj["attribution"] is None
    assert obj["decode_tps"] > 0 and 2.0 < obj["mean_commit_len"] < 5.0
    run_dir = Path(obj["run_dir"])
    for name in ("run.json", "requests.jsonl", "analysis.json", "report.html", "server.log"):
        assert (run_dir / name).is_file(), name
    assert (run_dir / "telemetry.jsonl").stat().st_size > 0  # the server's DDTREE lines
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "complete" and run["args"]["plan"]["steps"]
    tags = {json.loads(line)["spec"]["tag"] for line in (run_dir / "requests.jsonl").open()}
    assert {
        "full_generation",
        "two_point:n1",
        "two_point:n2",
        "context_sweep:256",
        "output_sweep:1000",
    } <= tags
    page = parse_page(run_dir / "report.html")
    series = json.loads((run_dir / "analysis.json").read_text())["series"]
    assert {
        "commit_len_histogram",
        "commit_len_by_position",
        "step_time_by_position",
        "two_point_vs_full",
    } <= set(series)
    for key in series:  # every series the analysis produced is drawn
        assert f"plot-{key}" in page.ids, key
    assert "embedded server: twin scenario seed-regression" in proc.stderr
    assert "HTML report:" in proc.stderr
    # the run is in the history
    runs = json.loads(cli("runs", "--json", home=tmp_path).stdout)
    assert any(r["path"] == str(run_dir.resolve()) for r in runs["runs"])


def test_healthy_server_has_no_acceptance_or_drift_finding(twin_server, tmp_path):
    srv = twin_server("healthy", time_scale=1.0, log_file=tmp_path / "server.log")
    obj, proc = diagnose_json(
        srv.url,
        tmp_path / "healthy",
        "--quick",
        "--prompt-tokens",
        "512",
        "--max-tokens",
        "600",
        "--logs",
        str(tmp_path / "server.log"),
        "--metrics-url",
        srv.url + "/metrics",
        "--concurrency",
        "1,2",
        *MAIN_ONLY,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_contract(obj)
    if client_was_the_limit(obj):
        return
    ids = finding_ids(obj)
    for wrong in (
        "acceptance_decay",
        "acceptance_low",
        "step_time_drift",
        "chunk_coalescing",
        "draft_window",
    ):
        assert wrong not in ids, ids
    assert obj["mean_commit_len"] > 4.0
    # every claim tested is in the JSON with its outcome; none of the wrong ones was reported
    tested = {t["id"]: t for t in obj["finding_tests"]}
    assert "two_point_bias" in tested and not tested["two_point_bias"]["reported"]
    assert all(t["reported"] == (t["id"] in ids) for t in tested.values())
    run_dir = Path(obj["run_dir"])
    formats = {json.loads(line)["format"] for line in (run_dir / "telemetry.jsonl").open()}
    assert "prometheus" in formats and len(formats) > 1  # the run-scoped delta and the log lines
    notes = json.loads((run_dir / "run.json").read_text())["notes"]
    assert any("run-scoped delta" in n for n in notes), notes
    tags = [json.loads(line)["spec"]["tag"] for line in (run_dir / "requests.jsonl").open()]
    assert tags.count("concurrency_sweep:2") == 2 and tags.count("concurrency_sweep:1") == 1
    assert "plot-concurrency" in parse_page(run_dir / "report.html").ids


def test_coalescing_is_named_and_steps_marked_unreliable(twin_server, tmp_path):
    log = tmp_path / "server.log"
    srv = twin_server("coalescing", time_scale=1.0, log_file=log)
    obj, proc = diagnose_json(
        srv.url,
        tmp_path / "coal",
        "--quick",
        "--prompt-tokens",
        "512",
        "--max-tokens",
        "600",
        "--logs-cmd",
        f"cat {log}",
        "--no-ignore-eos",
        "--temperature",
        "0.7",
        *MAIN_ONLY,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "chunk_coalescing" in finding_ids(obj)
    # the server states its stream interval: the merging is its own, not the client's
    coal = next(f for f in obj["findings"] if f["id"] == "chunk_coalescing")
    assert coal["cause"] == "stream_coalescing", coal
    assert [r["id"] for r in coal["ruled_out"]] == ["client"]
    # --no-ignore-eos and --temperature are recorded in the run and sent with every request
    run_json = json.loads((Path(obj["run_dir"]) / "run.json").read_text())
    assert run_json["args"]["ignore_eos"] is False and run_json["args"]["temperature"] == 0.7
    specs = [json.loads(line)["spec"] for line in (Path(obj["run_dir"]) / "requests.jsonl").open()]
    assert specs and not any(s["ignore_eos"] for s in specs)
    assert {s["temperature"] for s in specs} == {0.7}
    notes = json.loads((Path(obj["run_dir"]) / "run.json").read_text())["notes"]
    assert any(n.startswith(f"server logs (cat {log})") for n in notes), notes
    assert (Path(obj["run_dir"]) / "telemetry.jsonl").stat().st_size > 0
    analysis = json.loads((Path(obj["run_dir"]) / "analysis.json").read_text())
    assert analysis["steps_reliable"] is False


@pytest.mark.slow
def test_draft_window_is_named(twin_server, tmp_path):
    srv = twin_server("draft-window", time_scale=1.0)
    obj, proc = diagnose_json(
        srv.url,
        tmp_path / "dw",
        "--prompt-tokens",
        "1500",
        "--max-tokens",
        "1200",
        "--quick",
        *MAIN_ONLY,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if client_was_the_limit(obj):
        return
    ids = finding_ids(obj)
    assert "draft_window" in ids, ids
    # The twin states its window as SGLang does (server info), and the finding checks itself by it.
    f = next(x for x in obj["findings"] if x["id"] == "draft_window")
    stated = [e for e in f["evidence"] if e["label"] == "draft window the server states"]
    assert stated and stated[0]["value"] == 2048, f["evidence"]
    assert f["summary"].endswith("the drafter's window."), f["summary"]


def test_server_strings_are_escaped_in_the_written_report(twin_server, tmp_path):
    srv = twin_server("healthy", time_scale=1.0, served_model_name=HOSTILE)
    obj, proc = diagnose_json(
        srv.url,
        tmp_path / "esc",
        "--quick",
        "--prompt-tokens",
        "256",
        "--max-tokens",
        "200",
        *MAIN_ONLY,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = (Path(obj["run_dir"]) / "report.html").read_text()
    assert HOSTILE not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert HOSTILE in "".join(parse_page(Path(obj["run_dir"]) / "report.html").text)
    md = tmp_path / "r.md"
    rep = cli(
        "report",
        obj["run_dir"],
        "--markdown",
        str(md),
        "--html",
        str(tmp_path / "r.html"),
        home=tmp_path,
    )
    assert rep.exit_code == 0, rep.stderr
    assert HOSTILE not in md.read_text() and (tmp_path / "r.html").is_file()


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args in (
        ["--baseline", str(tmp_path / "missing")],
        ["--logs", str(tmp_path / "no.log")],
        ["--prompt-tokens", "0"],
        ["--repeat", "0"],
        ["--concurrency", "1,x"],
    ):
        res = cli("diagnose", "http://127.0.0.1:9", *args, home=tmp_path)
        assert res.exit_code == 2, (args, res.stderr)
        assert "Traceback" not in res.stderr and "error:" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr  # one line


def test_unreachable_server_exits_1_without_traceback(tmp_path):
    res = cli(
        "diagnose", "http://127.0.0.1:9", "--quick", "--out", str(tmp_path / "x"), home=tmp_path
    )
    assert res.exit_code == 1, res.stderr
    assert "Traceback" not in res.stderr and "not reachable" in res.stderr
    res = cli("diagnose", "http://127.0.0.1:9", "--json", home=tmp_path)
    obj = json.loads(res.stdout)
    assert res.exit_code == 1 and "not reachable" in obj["error"] and obj["decode_tps"] is None


@pytest.mark.engine
def test_embedded_default_is_the_speculating_engine(tmp_path):
    """What `specscope diagnose` (no URL, no flags) serves: the real engine with speculation on
    loopback, which stops with its context."""
    import urllib.request

    from specscope.embedded import embedded_server

    with embedded_server(log_file=tmp_path / "server.log") as server:
        url = server.url
        assert url.startswith("http://127.0.0.1:")
        info = json.loads(urllib.request.urlopen(url + "/get_server_info", timeout=10).read())
        assert server.description.startswith("engine ")
        assert "draft tokens" in server.description
        assert not server.notes, server.notes
        assert info is not None
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/v1/models", timeout=2)


def test_embedded_twin_on_request_is_seed_regression(tmp_path):
    """`--backend twin` without a scenario gives the story's regression, on loopback."""
    import urllib.request

    from specscope.embedded import embedded_server

    with embedded_server(backend="twin", log_file=tmp_path / "server.log") as server:
        url = server.url
        assert url.startswith("http://127.0.0.1:")
        models = json.loads(urllib.request.urlopen(url + "/v1/models", timeout=10).read())
        assert models["data"][0]["id"] == "twin-k2.6-ddtree"
        assert server.description == "twin scenario seed-regression"
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/v1/models", timeout=2)
