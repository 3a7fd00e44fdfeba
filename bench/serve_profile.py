"""Where a served step's time goes (issue #38 item 1): py-spy's samples of `specscope serve`
under a probe's load, summed by part of the server.

py-spy (a sampling profiler: it reads the server's stacks from outside at a fixed rate, so the
server runs at its own speed, unlike cProfile's per-call hooks) attaches to the server for one
load level and writes its samples as collapsed stacks (`--format raw`: one line per distinct
stack, `frame;frame;...;frame COUNT`, outermost first). Each sample is assigned to one part by
the frames it holds, the most specific first:

- idle: the event loop waiting in select/epoll with nothing to run;
- engine: anything under specscope/engine/ (the forward pass, sampling, the KV cache, and the
  host's waits for the GPU, which show as the Python line that reads a result back);
- detokenize: text from token ids (serve/formatting.py, tokenizers);
- stream: per-request events and SSE chunks (serve/streaming.py, the route handlers);
- scheduler: admission, batching, the step loop's own bookkeeping (serve/scheduler.py);
- http: uvicorn, h11, starlette, fastapi, anyio (parsing, writing to sockets);
- asyncio: the loop's machinery between callbacks;
- other.

The figure is each part's share of the samples taken while the server was busy (idle left
out), with the leaf functions that carry the most samples.

The server's own account of a step (`specscope serve` counts it in /metrics: the backend's
time, the wait to get the step back on the event loop, the scheduler's delivery after it, the
time between steps) is read from two scrapes around a load level with `--metrics BEFORE AFTER`:
the mean of each part per step, and their sum against the mean step.

    python bench/serve_profile.py PROFILE.txt [PROFILE2.txt ...] [--top 12]
    python bench/serve_profile.py --metrics BEFORE.txt AFTER.txt
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

# (part, pattern on a frame's "function (path:line)" text), checked in this order against every
# frame of a stack; the first part with a matching frame wins
PARTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("engine", re.compile(r"specscope/engine/")),
    ("detokenize", re.compile(r"specscope/serve/formatting\.py|tokenizers/")),
    ("stream", re.compile(r"specscope/serve/(streaming|routes_\w+)\.py")),
    ("scheduler", re.compile(r"specscope/serve/scheduler\.py")),
    ("http", re.compile(r"uvicorn/|h11/|starlette/|fastapi/|anyio/")),
    ("asyncio", re.compile(r"asyncio/")),
)
# the innermost frame of a thread with nothing to do: an event loop in select/epoll, a pool
# worker waiting for an item, a thread waiting on a condition (py-spy --idle keeps these)
IDLE = re.compile(
    r"^(\w+\.)?(select|poll|_poll|_run_once) \((selectors|asyncio/base_events)\.py"
    r"|^_worker \(concurrent/futures/thread\.py|^(\w+\.)?(wait|sleep) \(threading\.py"
)
# the innermost Python frame of an event loop implemented in C (uvloop): the loop's own work
# (socket reads and writes, callback dispatch) or, without --gil, its wait for events
LOOP_C = re.compile(
    r"^(\w+\.)?(run|run_forever|run_until_complete) \(asyncio/(runners|base_events)\.py"
)
LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
THREAD = re.compile(r"^thread \(\d+\): (?P<name>.*)$")


def part_of(frames: list[str]) -> str:
    """The part of the server one sample was in (frames outermost first)."""
    if frames and IDLE.match(frames[-1]):
        return "idle"
    if frames and LOOP_C.match(frames[-1]):
        return "loop"
    for part, pattern in PARTS:
        if any(pattern.search(f) for f in frames):
            return part
    return "other"


Sample = tuple[str, list[str], int]  # (thread, frames outermost first, count)


def read_samples(path: Path) -> list[Sample]:
    """(thread, frames, count) of each distinct stack in a py-spy raw file (`--threads` puts the
    thread first; without it every stack is one thread's); lines that are not a stack are
    skipped (a truncated file still reads)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        m = LINE.match(line.strip())
        if not m:
            continue
        frames = m["stack"].split(";")
        t = THREAD.match(frames[0])
        thread = t["name"] if t else "all threads"
        out.append((thread, frames[1:] if t else frames, int(m["count"])))
    return out


def _by_part(samples: list[Sample]) -> tuple[Counter[str], Counter[tuple[str, str]]]:
    parts: Counter[str] = Counter()
    leaves: Counter[tuple[str, str]] = Counter()
    for _, frames, n in samples:
        part = part_of(frames)
        parts[part] += n
        if part != "idle" and frames:
            leaves[(part, frames[-1])] += n
    return parts, leaves


def summarize(samples: list[Sample], top: int, slots: float | None = None) -> list[str]:
    """The samples by thread and by part, with the leaf functions that carry most. Taken with
    py-spy --gil (only the thread holding the interpreter is sampled), every sample is Python
    work that had the GIL, whichever thread did it; `slots` (the seconds sampled x the rate)
    gives the share of the time anyone held it."""
    threads: Counter[str] = Counter()
    for thread, _, n in samples:
        threads[thread] += n
    total = sum(threads.values())
    if not total:
        return ["no samples"]
    head = f"{total} samples"
    if slots:
        head += f": the GIL held {total / slots:.0%} of the time sampled"
    lines = [head, "by thread:"]
    for thread, n in threads.most_common(5):
        lines.append(f"  {n / total:6.1%}  {thread[:60]}")
    parts, leaves = _by_part(samples)
    busy = total - parts["idle"]
    lines.append("by part (share of the samples not idle):")
    for part, n in parts.most_common():
        share = "(idle)" if part == "idle" else f"{n / busy:6.1%}" if busy else ""
        lines.append(f"  {part:<11} {n:>7}  {share}")
    lines.append(f"busiest leaf functions, top {top}:")
    for (part, leaf), n in leaves.most_common(top):
        lines.append(f"  {n / busy:6.1%}  [{part}] {leaf}" if busy else f"  {leaf}")
    return lines


STEP_PARTS = ("engine", "wait", "post", "between", "prefill")


def _counters(text: str) -> dict[str, float]:
    """Every counter sample of a /metrics text by its sample name (labels summed over)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


def step_parts(before: str, after: str) -> list[str]:
    """Per step, the mean of each part the server counted between two scrapes."""
    b, a = _counters(before), _counters(after)
    steps = a.get("sglang:forward_steps_total", 0.0) - b.get("sglang:forward_steps_total", 0.0)
    if steps <= 0:
        return ["no step between the two scrapes"]
    lines = [f"{steps:.0f} steps; per step, ms:"]
    total = 0.0
    for part in STEP_PARTS:
        name = f"specscope:step_{part}_seconds_total"
        if name not in a:
            return [f"the server does not count {name} (not specscope serve?)"]
        ms = (a[name] - b.get(name, 0.0)) / steps * 1e3
        total += ms
        lines.append(f"  {part:<8} {ms:8.3f}")
    lines.append(f"  {'sum':<8} {total:8.3f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profiles", nargs="*", type=Path)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--metrics", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    ap.add_argument(
        "--slots", type=float, default=None, help="seconds sampled x the rate (py-spy --gil)"
    )
    args = ap.parse_args(argv)
    if args.metrics:
        before, after = args.metrics
        if not (before.is_file() and after.is_file()):
            print(f"error: {before} or {after}: no such file")
            return 2
        print("\n".join(step_parts(before.read_text(), after.read_text())))
    for path in args.profiles:
        if not path.is_file():
            print(f"error: {path}: no such file")
            return 2
        print(f"== {path.name}")
        print("\n".join(summarize(read_samples(path), args.top, args.slots)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
