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

    python bench/serve_profile.py PROFILE.txt [PROFILE2.txt ...] [--top 12]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

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
LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
THREAD = re.compile(r"^thread \(\d+\): (?P<name>.*)$")


def part_of(frames: list[str]) -> str:
    """The part of the server one sample was in (frames outermost first)."""
    if frames and IDLE.match(frames[-1]):
        return "idle"
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


def summarize(samples: list[Sample], top: int) -> list[str]:
    """Per thread its busy share; for the busiest thread (the event loop's, where the server's
    step runs) the share of its busy time by part and the leaf functions that carry most."""
    threads: Counter[str] = Counter()
    busy_by_thread: Counter[str] = Counter()
    for thread, frames, n in samples:
        threads[thread] += n
        if part_of(frames) != "idle":
            busy_by_thread[thread] += n
    if not threads:
        return ["no samples"]
    lines = ["threads (samples, busy share):"]
    for thread, n in threads.most_common(6):
        lines.append(f"  {thread[:60]:<60} {n:>7}  busy {busy_by_thread[thread] / n:6.1%}")
    main = busy_by_thread.most_common(1)[0][0] if busy_by_thread else threads.most_common(1)[0][0]
    parts, leaves = _by_part([s for s in samples if s[0] == main])
    busy = sum(parts.values()) - parts["idle"]
    lines.append(f"{main[:60]}: by part (share of its busy samples, {busy}):")
    for part, n in parts.most_common():
        share = "(not busy)" if part == "idle" else f"{n / busy:6.1%}" if busy else ""
        lines.append(f"  {part:<11} {n:>7}  {share}")
    lines.append(f"its busiest leaf functions, top {top}:")
    for (part, leaf), n in leaves.most_common(top):
        lines.append(f"  {n / busy:6.1%}  [{part}] {leaf}" if busy else f"  {leaf}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profiles", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args(argv)
    for path in args.profiles:
        if not path.is_file():
            print(f"error: {path}: no such file")
            return 2
        print(f"== {path.name}")
        print("\n".join(summarize(read_samples(path), args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
