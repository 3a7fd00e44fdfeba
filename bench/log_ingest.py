"""Benchmark: `specscope logs` against the story's shell pipeline on the same large log.

The anchor is the seed story's command, measured side by side on the same file:
    grep "TP0\\].*DDTREE metrics" | grep -oE "avg_accepted_drafts=[0-9.]+ avg_commit_len=[0-9.]+" \\
        | sort | uniq -c
specscope runs the same code path as `specscope logs --json` (in-process: `read_logs`), which
extracts every field of every format (SGLang decode batches, DDTREE steps, vLLM intervals), not
just two. Prints lines/s for both and ratio = specscope_time / pipeline_time (goal <= 1.0),
from the median of `--repeat` interleaved runs, with the load average (the machine is shared:
compare ratios, not absolute times).

    .venv/bin/python bench/log_ingest.py --size 200MB --repeat 3
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

from specscope.telemetry.ingest import LogQuery, read_logs

STORY_PAIRS = [
    (1, 2, 67),
    (2, 3, 63),
    (3, 4, 40),
    (0, 1, 34),
    (4, 5, 20),
    (5, 6, 10),
    (6, 7, 2),
    (1, 1, 1),
]
PIPELINE = (
    'grep "TP0\\].*DDTREE metrics" {path} | '
    'grep -oE "avg_accepted_drafts=[0-9.]+ avg_commit_len=[0-9.]+" | sort | uniq -c'
)
NOISE = [
    'INFO:     127.0.0.1:{port} - "POST /generate HTTP/1.1" 200 OK',
    "[{date} {time} TP{r}] Prefill batch, #new-seq: 1, #new-token: 2701, #cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0, ",
    "[{date} {time} TP{r}] Cache flushed successfully!",
    "[{date} {time}] Receive: obj=GenerateReqInput(rid='{rid}', text=None, sampling_params={{'max_new_tokens': 1500}})",
    "WARNING: something unrelated happened in worker {port}, continuing",
]


def parse_size(text: str) -> int:
    units = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "B": 1}
    t = text.strip().upper()
    for u, mult in units.items():
        if t.endswith(u):
            return int(float(t[: -len(u)]) * mult)
    return int(t)


def generate(path: str, size: int, seed: int = 0) -> Counter:
    """A journal-style mixed log of about `size` bytes; returns the TP0 DDTREE pair counts it
    wrote (the expected answer for both tools)."""
    rng = random.Random(seed)
    weights = [n for _, _, n in STORY_PAIRS]
    expected: Counter = Counter()
    written = 0
    step = 0
    t0 = time.time() - 3600
    with open(path, "w", encoding="utf-8") as f:
        while written < size:
            buf = []
            for _ in range(2000):
                step += 1
                now = t0 + step * 0.05
                tm = time.localtime(now)
                date = time.strftime("%Y-%m-%d", tm)
                clock = time.strftime("%H:%M:%S", tm)
                jr = time.strftime("%b %d %H:%M:%S", tm)
                a, c, _ = rng.choices(STORY_PAIRS, weights)[0]
                rid = f"{step // 300:08x}"
                for r in range(4):  # TP0 plus three duplicate ranks, as in an 8-GPU journal
                    buf.append(
                        f"{jr} gpu01 python[4242]: [{date} {clock} TP{r}] DDTREE metrics req={rid} "
                        f"step={step % 300} avg_accepted_drafts={a:.2f} avg_commit_len={c:.2f}"
                    )
                expected[(a, c)] += 1
                for _ in range(3):
                    buf.append(
                        jr
                        + " gpu01 python[4242]: "
                        + rng.choice(NOISE).format(
                            port=rng.randint(1000, 65000),
                            date=date,
                            time=clock,
                            r=rng.randint(0, 7),
                            rid=rid,
                        )
                    )
                if step % 40 == 0:
                    buf.append(
                        f"{jr} gpu01 python[4242]: [{date} {clock} TP0] Decode batch, #running-req: 1, "
                        f"#token: {2701 + step % 1500}, token usage: 0.02, accept len: {c + 0.05:.2f}, "
                        "accept rate: 0.41, cuda graph: True, gen throughput (token/s): 32.70, #queue-req: 0"
                    )
                if step % 100 == 0:
                    buf.append(
                        f"(APIServer pid=1) INFO {time.strftime('%m-%d %H:%M:%S', tm)} [metrics.py:101] "
                        "SpecDecoding metrics: Mean acceptance length: 2.37, Accepted throughput: 8.90 "
                        "tokens/s, Drafted throughput: 97.50 tokens/s, Accepted: 89 tokens, Drafted: 975 "
                        "tokens, Per-position acceptance rate: 0.600, 0.385, 0.215, 0.108, 0.062, 0.000, "
                        "Avg Draft acceptance rate: 9.1%"
                    )
            text = "\n".join(buf) + "\n"
            f.write(text)
            written += len(text)
    return expected


def run_pipeline(path: str) -> tuple[float, Counter]:
    t = time.perf_counter()
    out = subprocess.run(
        ["bash", "-c", PIPELINE.format(path=path)], capture_output=True, text=True, check=True
    ).stdout
    elapsed = time.perf_counter() - t
    counts: Counter = Counter()
    for line in out.splitlines():
        n, pair = line.split(None, 1)
        a, c = (float(kv.split("=")[1]) for kv in pair.split())
        counts[(int(a), int(c))] = int(n)
    return elapsed, counts


def run_specscope(path: str, fmt: str = "auto", jobs: int = 1) -> tuple[float, Counter, int, int]:
    t = time.perf_counter()
    result = read_logs(LogQuery(paths=[path], format=fmt, jobs=jobs))
    elapsed = time.perf_counter() - t
    s = result.summary
    counts = Counter({(int(a), int(c)): n for (a, c), n in s.step_pairs.items()})
    return elapsed, counts, s.lines, s.records


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--size", default="1GB", help="log size, e.g. 1GB, 200MB (default 1GB)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="timed runs of each tool, interleaved (median is kept)",
    )
    ap.add_argument("--keep", help="write the log here and keep it (default: temp dir, removed)")
    ap.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="specscope processes for the file (default 0 = usable CPUs, max 4, as `specscope "
        "logs` does; the shell pipeline runs its four stages in parallel too)",
    )
    args = ap.parse_args()
    size = parse_size(args.size)
    tmp = None if args.keep else tempfile.mkdtemp(prefix="specscope-bench-")
    path = args.keep or os.path.join(tmp, "journal.log")  # type: ignore[arg-type]
    try:
        t = time.perf_counter()
        expected = generate(path, size)
        actual_size = os.path.getsize(path)
        print(
            f"generated {actual_size / 1e6:.0f} MB in {time.perf_counter() - t:.1f}s: {path}",
            file=sys.stderr,
        )
        load_before = os.getloadavg()
        times: dict[str, list[float]] = {"pipe": [], "auto": [], "ddtree": []}
        for _ in range(max(1, args.repeat)):
            pt, pipe_counts = run_pipeline(path)
            st, spec_counts, lines, records = run_specscope(path, "auto", args.jobs)
            dt, ddtree_counts, _, _ = run_specscope(path, "ddtree", args.jobs)
            for key, value in (("pipe", pt), ("auto", st), ("ddtree", dt)):
                times[key].append(value)
        load_after = os.getloadavg()
        pipe_t, spec_t, ddtree_t = (statistics.median(times[k]) for k in ("pipe", "auto", "ddtree"))
        agree = pipe_counts == spec_counts == ddtree_counts == expected
        runs = ", ".join(f"{k} " + " ".join(f"{v:.2f}" for v in vs) for k, vs in times.items())
        print(f"size_bytes        {actual_size}")
        print(f"lines             {lines}")
        print(f"specscope records {records} (all formats, TP0)")
        print(f"runs (s)          {runs}  (median kept; jobs={args.jobs})")
        print(
            "load average      "
            + " ".join(f"{x:.2f}" for x in load_before)
            + " before, "
            + " ".join(f"{x:.2f}" for x in load_after)
            + f" after ({os.cpu_count()} CPUs)"
        )
        print(f"pipeline          {pipe_t:.2f} s  {lines / pipe_t:,.0f} lines/s")
        print(
            f"specscope         {spec_t:.2f} s  {lines / spec_t:,.0f} lines/s  (--format auto: every format)"
        )
        print(
            f"specscope ddtree  {ddtree_t:.2f} s  {lines / ddtree_t:,.0f} lines/s  (--format ddtree: the pipeline's format)"
        )
        print(
            f"ratio             {spec_t / pipe_t:.2f}  (specscope_time / pipeline_time; goal <= 1.0)"
        )
        print(f"ratio ddtree      {ddtree_t / pipe_t:.2f}")
        print(f"histograms agree  {agree}")
        return 0 if agree else 1
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
