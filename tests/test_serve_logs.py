"""Server log lines match the formats of shared/reference/observability.md exactly (§1a SGLang
"Decode batch", the seed story's "DDTREE metrics" line) and agree with the twin's truth."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

PREFIX = r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) TP0\] "
DECODE_BATCH = re.compile(
    PREFIX + r"Decode batch, #running-req: (\d+), #token: (\d+), token usage: (\d+\.\d{2}), "
    r"(?:accept len: (\d+\.\d{2}), accept rate: (\d+\.\d{2}), )?cuda graph: (True|False), "
    r"gen throughput \(token/s\): (\d+\.\d{2}), #queue-req: (\d+)$"
)
DDTREE = re.compile(
    PREFIX + r"DDTREE metrics req=(\S+) step=(\d+) avg_accepted_drafts=(\d+\.\d{2}) "
    r"avg_commit_len=(\d+\.\d{2})$"
)


def _generate(url: str, n: int, text: str = "a b") -> str:
    body = json.dumps({"text": text, "sampling_params": {"max_new_tokens": n}}).encode()
    req = urllib.request.Request(
        url + "/generate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["meta_info"]["id"]


def test_log_lines_match_sglang_formats_and_truth(twin_server, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    srv = twin_server("seed-regression", time_scale=0.02, decode_log_interval=5, log_file=log)
    rids = [_generate(srv.url, 150, f"p {i}") for i in range(2)]
    srv.stop()
    lines = log.read_text().splitlines()
    decode = [m for ln in lines if (m := DECODE_BATCH.match(ln))]
    steps = [m for ln in lines if (m := DDTREE.match(ln))]
    other = [ln for ln in lines if not DECODE_BATCH.match(ln) and not DDTREE.match(ln)]
    assert len(other) <= 1 and all("specscope serve:" in ln for ln in other)  # start-up line
    truth_steps = [st for rid in rids for st in srv.backend.truth(rid)["steps"]]
    assert len(steps) == len(truth_steps)
    for m, st in zip(steps, truth_steps, strict=True):
        assert float(m.group(4)) == st["accepted_drafts"]
        assert float(m.group(5)) == st["commit_len"]
    assert {m.group(2) for m in steps} == set(rids)
    assert [int(m.group(3)) for m in steps if m.group(2) == rids[0]] == list(
        range(1, len(srv.backend.truth(rids[0])["steps"]) + 1)
    )
    # One "Decode batch" line per 5 batched steps, with SGLang's accept len / rate.
    assert len(decode) == len(truth_steps) // 5
    for m in decode:
        assert int(m.group(2)) == 1 and m.group(9) == "0"
        assert 1.0 <= float(m.group(5)) <= 8.0 and 0.0 <= float(m.group(6)) <= 1.0
        assert m.group(7) == "False"


def test_no_speculation_logs_no_accept_fields(twin_server, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    srv = twin_server(
        "speculation-overhead:baseline", time_scale=0.02, decode_log_interval=4, log_file=log
    )
    _generate(srv.url, 20)
    srv.stop()
    lines = log.read_text().splitlines()
    decode = [m for ln in lines if (m := DECODE_BATCH.match(ln))]
    assert len(decode) == 5 and all(m.group(5) is None for m in decode)
    assert not any("DDTREE" in ln for ln in lines)


def test_cuda_graph_field_says_whether_the_batch_fits_the_graphs(twin_server, tmp_path) -> None:
    """`cuda graph:` is the server's statement, not a constant: True while the running batch
    is within the graphs it states (`graph_max_batch`, as the engine on CUDA does), else False."""
    log = tmp_path / "server.log"
    srv = twin_server(
        "speculation-overhead:baseline", time_scale=0.02, decode_log_interval=4, log_file=log
    )
    srv.backend.info.extra["graph_max_batch"] = 1
    _generate(srv.url, 8)
    srv.backend.info.extra["graph_max_batch"] = 0  # a batch of 1 above graphs that stop at 0
    _generate(srv.url, 8)
    srv.stop()
    flags = [m.group(7) for ln in log.read_text().splitlines() if (m := DECODE_BATCH.match(ln))]
    # (a line may span both requests: the interval counts steps, not requests)
    assert len(flags) >= 3 and flags[0] == "True" and flags[-1] == "False"
