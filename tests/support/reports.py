"""Hand-made analyses for report tests: every plot series filled, hostile server strings."""

from __future__ import annotations

from specscope.analysis.result import Analysis, Attribution, Evidence, Finding
from specscope.trace import RunInfo
from specscope.trace.model import Run
from specscope.twin import scenario as tw
from specscope.validation import virtual

HOSTILE = "<script>alert(1)</script>"
HOSTILE_ERROR = "</script><img src=x onerror=alert(2)>"


def full_analysis(partial: bool = False) -> Analysis:
    """The seed story's numbers, with a baseline, so every plot has data."""
    pos = list(range(0, 1500, 50))
    return Analysis(
        run_dir="/tmp/run",
        partial=partial,
        # a verdict sentence may quote the server (a disagreement, a speculation reason)
        verdict=[
            "Decode runs at 32.7 tokens/s = 2.90 tokens per step / 89.0 ms per step.",
            "Against the baseline: 4.20× slower = 1.72× fewer tokens per step × 2.44× longer "
            "steps.",
            f"Client and server disagree: the server says {HOSTILE}.",
        ],
        decode_tps=32.7,
        ttft_s=0.06,
        e2e_s=46.0,
        mean_commit_len=2.9,
        mean_step_s=0.089,
        commit_len_source="server log DDTREE metrics",
        steps_reliable=True,
        requests=14,
        errors=1,
        findings=[
            Finding(
                id="acceptance_decay",
                summary=f"commit length falls 5.0 -> 2.9 {HOSTILE}",
                confidence=0.9,
                factor=1.7,
                next="measure a short-prompt long generation",
                evidence=[
                    Evidence(
                        label="first 200 tokens", value=5.0, unit="tok/step", source="client chunks"
                    )
                ],
            ),
            Finding(
                id="step_time_drift",
                summary="step time grows with output position",
                confidence=0.8,
                factor=2.0,
                next="try a contiguous KV allocation",
                evidence=[Evidence(label="slope", value=6e-5, unit="s/token", source="fit")],
            ),
        ],
        attribution=Attribution(
            tps_ratio=4.2,
            acceptance_factor=1.72,
            step_time_factor=2.44,
            baseline_run="baseline-run",
        ),
        step_time_model={"s0": 0.03, "per_context_token": 7e-6, "r2": 0.9},
        series={
            "commit_len_histogram": {
                "commit_len": [1, 2, 3, 4, 5, 6, 7],
                "count": [35, 67, 63, 40, 20, 10, 2],
                "source": "log",
            },
            "commit_len_by_position": {
                "output_pos": pos,
                "mean_commit_len": [5 - i * 0.07 for i in range(len(pos))],
            },
            "step_time_by_position": {
                "output_pos": pos,
                "step_s": [0.04 + i * 0.003 for i in range(len(pos))],
                "expected_step_s": [0.04 + i * 0.0004 for i in range(len(pos))],
            },
            "tps_by_context": {
                "context": [256, 1350, 2700, 4200],
                "decode_tps": [150, 130, 113, 90],
                "step_s": [0.03, 0.035, 0.04, 0.05],
                "commit_len": [5, 5, 4.8, 4.5],
            },
            "tps_by_output_len": {"max_tokens": [375, 1500], "decode_tps": [90, 45]},
            "two_point_vs_full": {
                "label": ["two-point 64..256", "full generation"],
                "decode_tps": [113.0, 32.7],
            },
            "baseline_vs_observed": {
                "label": ["baseline", "observed"],
                "decode_tps": [138, 32.7],
                "mean_commit_len": [5.0, 2.9],
                "mean_step_s": [0.036, 0.089],
            },
        },
        notes=[f"model said {HOSTILE}"],
    )


def hostile_info(status: str = "complete") -> RunInfo:
    return RunInfo(
        run_id="r1",
        kind="diagnose",
        endpoint="http://127.0.0.1:1",
        model=HOSTILE,
        status=status,
        status_reason="interrupted (Ctrl-C)" if status == "partial" else "",
    )


PLOT_KEYS = [
    "commit_len_histogram",
    "commit_len_by_position",
    "step_time_by_position",
    "tps_by_context",
    "tps_by_output_len",
    "two_point_vs_full",
    "baseline_vs_observed",
]


def story_run(scenario: str, seed: int) -> Run:
    """The seed story's plan (short) replayed through a twin scenario's step model on a virtual
    clock: a real run's shape, no server."""
    plan = virtual.story_plan(full_prompt=1024, full_tokens=400, sweep=(256, 1024), repeats=1)
    return virtual.scenario_run(tw.load_scenario(scenario), plan, seed=seed).run
