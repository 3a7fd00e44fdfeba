"""The fault matrix (issue #35 item 5): seed a known fault into the engine server, diagnose it
as a user would, and score the top cause against the fault's cause (docs/faults.md).

The twin suite (`validation/accuracy.py`) scores the analysis against an exact truth; this one
scores the whole tool against real mechanisms on a real server, so it runs processes: one
`specscope serve --backend engine` per row and repeat, then `specscope diagnose URL --json`
against it. Both are run without a shell, each with a timeout, and the server is always
stopped. A run that fails is an outcome with a one-line reason (never a traceback) and counts
as wrong: a tool that cannot diagnose a faulted server has not diagnosed it.

Pure parts (the rows, the sizes, the argv, `is_right`, the tables) are what the tests check;
`run_row` is what bench/fault_matrix.py runs.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from specscope.analysis.diagnosis.cards import Cause

# `python -m specscope.cli`: the package has no __main__, and the console script may not be on
# PATH; the interpreter running this module is the one whose specscope is under test.
SPECSCOPE = (sys.executable, "-m", "specscope.cli")
# `specscope serve` announces itself on stderr (commands/serve.py, report/notices.py):
# "specscope serve: engine listening on http://127.0.0.1:PORT".
LISTENING = re.compile(r"specscope serve: \S+ listening on (https?://\S+)")
# Loading torch and the model on a busy 2-core CPU takes tens of seconds; minutes means stuck.
START_TIMEOUT_S = 300.0
STOP_GRACE_S = 10.0
ERROR_COLUMN = "error"
NO_CAUSE = "(none)"


def _causes(*causes: Cause | None) -> frozenset[str | None]:
    """Expected causes as plain strings (JSON holds strings), named through `Cause` so that a
    misspelt cause fails at import, not as a row that can never be right."""
    return frozenset(None if c is None else Cause(c).value for c in causes)


# The causes the seeded faults stand for: a clean server blamed on one of them is a false alarm.
FAULT_CAUSES = _causes(
    Cause.host_per_token,
    Cause.speculation_overhead,
    Cause.acceptance_position,
    Cause.draft_window,
    Cause.stream_coalescing,
    Cause.kv_layout,
    Cause.graph_mode,
    Cause.acceptance_concurrency,
)
# What a clean plain server may be blamed on: nothing, or attention growing with context.
CLEAN_PLAIN = _causes(None, Cause.attention_context)


@dataclass(frozen=True)
class Row:
    """One seeded fault (or a clean control): the server's flags, the prompts, what is right.

    `serve` may hold `{host_us}`, `{window}` and `{graph_batch}`, filled from the device's
    `Size`. Right means the top cause is in `expected`, or (`negate`) is not in it; with
    `every_finding`, every finding's cause must also be in `expected` (a clean row may not be
    blamed on anything else, even below the top). `load`: the fault shows only with several
    requests in flight, so diagnose adds a concurrency sweep (`--concurrency`, the size's
    levels) as a user diagnosing a server under load would."""

    name: str
    serve: tuple[str, ...]
    workload: str
    expected: frozenset[str | None]
    negate: bool = False
    every_finding: bool = False
    clean: bool = False
    note: str = ""
    load: bool = False


ROWS: tuple[Row, ...] = (
    Row(
        "clean-plain",
        ("--drafter", "none"),
        "long-writing",
        CLEAN_PLAIN,
        every_finding=True,
        clean=True,
        note="no cause, or attention_context (a context_scaling finding); never another cause",
    ),
    Row(
        "clean-ngram",
        ("--drafter", "ngram", "--verify", "tree"),
        "code-edit",
        FAULT_CAUSES,
        negate=True,
        clean=True,
        note="top cause none of the seeded faults' causes",
    ),
    Row(
        "detok-full",
        ("--drafter", "none", "--fault", "detok-full"),
        "long-writing",
        _causes(Cause.host_per_token),
    ),
    Row(
        "host-work",
        ("--drafter", "none", "--fault", "host-per-token={host_us}"),
        "long-writing",
        _causes(Cause.host_per_token),
    ),
    Row(
        "no-accept",
        ("--drafter", "ngram", "--verify", "tree", "--fault", "spec-no-accept"),
        "code-edit",
        _causes(Cause.speculation_overhead),
    ),
    Row(
        "position",
        ("--drafter", "ngram", "--fault", "prompt-only-ngram"),
        "code-edit",
        _causes(Cause.acceptance_position),
    ),
    Row(
        "window",
        ("--drafter", "ngram", "--draft-window", "{window}"),
        "prose-edit",
        _causes(Cause.draft_window),
        note="prose-edit: the answer copies the text from its start, which a window hides once "
        "the prompt is longer than it; the context sweep adds prompts either side of the window "
        "the server states (window_gap)",
    ),
    Row(
        "coalescing",
        ("--drafter", "none", "--stream-interval", "4"),
        "long-writing",
        _causes(Cause.stream_coalescing),
    ),
    Row(
        "scattered-kv",
        ("--page-size", "1", "--kv-alloc", "scattered"),
        "long-writing",
        _causes(Cause.kv_layout, None, Cause.attention_context),
        note="kv_layout where its cost shows above the machine's noise, else the clean plain "
        "diagnosis (docs/faults.md): the table says which held",
    ),
    Row(
        "clean-load",
        ("--drafter", "ngram", "--num-draft-tokens", "4"),
        "code-edit",
        FAULT_CAUSES,
        negate=True,
        clean=True,
        load=True,
        note="the load rows' control: the n-gram server under the same concurrency sweep, "
        "top cause none of the seeded faults' causes",
    ),
    Row(
        "graph-off",
        ("--drafter", "none", "--fault", "graph-off-above={graph_batch}"),
        "long-writing",
        _causes(Cause.graph_mode),
        load=True,
        note="steps of batches above the size's graph_batch run eager; the sweep's highest "
        "level lies above it",
    ),
    Row(
        "batch-accept",
        ("--drafter", "ngram", "--num-draft-tokens", "4", "--fault", "draft-budget=4"),
        "code-edit",
        _causes(Cause.acceptance_concurrency),
        load=True,
        note="4 drafted tokens a step shared by the batch: whole drafts alone, one token each "
        "at concurrency 4",
    ),
)
ROWS_BY_NAME = {r.name: r for r in ROWS}


def clean_row(row: Row) -> Row:
    """The clean control of a row's drafter: what a right diagnosis looks like where the row's
    fault cannot show (a server with a drafter may still be blamed on its drafter's quality)."""
    drafts = "--drafter" in row.serve and row.serve[row.serve.index("--drafter") + 1] != "none"
    return ROWS_BY_NAME["clean-ngram" if drafts else "clean-plain"]


class UnknownRow(ValueError):
    """A --faults name that is not a row."""


def select_rows(spec: str | None) -> list[Row]:
    """The rows named in `spec` (comma-separated), in the table's order; all when empty."""
    if not spec or not spec.strip():
        return list(ROWS)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in ROWS_BY_NAME]
    if unknown:
        raise UnknownRow(
            f"unknown fault row(s): {', '.join(unknown)} (known: {', '.join(ROWS_BY_NAME)})"
        )
    return [r for r in ROWS if r.name in names]


@dataclass(frozen=True)
class Size:
    """How big one diagnosis is on a device, and the sizes the seeded faults take there.

    `precision` / `repeat` None: diagnose's own default (with --quick: +-10% within 120 s)."""

    prompt_tokens: int
    max_tokens: int
    host_us: float  # host-per-token=US: host work per generated token so far
    window: int  # --draft-window W
    precision: float | None = None
    repeat: int | None = None
    # the load rows' concurrency sweep (diagnose --concurrency), and the batch above which the
    # graph-off row's steps leave the CUDA graphs: below the sweep's highest level
    concurrency: str = "1,4"
    graph_batch: int = 2
    # rows whose fault costs less than the machine's noise here (measured: the figure is the
    # reason): a right diagnosis of them is the clean plain one
    null_rows: dict[str, str] = field(default_factory=dict)

    def diagnose_flags(self) -> list[str]:
        out = ["--prompt-tokens", str(self.prompt_tokens), "--max-tokens", str(self.max_tokens)]
        if self.precision is not None:
            out += ["--precision", f"{self.precision:g}"]
        if self.repeat is not None:
            out += ["--repeat", str(self.repeat)]
        return out


# Why the acceptance-shape rows cannot show on this CPU's sizes: SmolLM2-135M (greedy) falls into
# a repetition loop early on these prompts, and the diagnosis keeps loop steps out of every
# acceptance-shape and (with speculation on) step-time fit, as it must.
LOOPING_CPU = (
    "SmolLM2-135M loops from about token 27 on the code-edit prompts at 192 -> 256 tokens (every "
    "main generation of the first matrix pass, --no-ignore-eos or not; headline_loops): the "
    "acceptance shape along a generation cannot be read from loops"
)

NO_GRAPHS_CPU = (
    "the CPU runs every step on the eager forward (no CUDA graphs): graph-off-above is accepted "
    "and changes nothing, and the server states it (engine_faults, no graph_max_batch)"
)

# Rows once run on a workload where their fault had nothing to act on, measured null there:
# (device, row, workload) -> why. The earlier matrices' recorded runs are re-analysed against
# these (bench/fault_matrix_reanalyze.py), the rows themselves now use a workload that shows.
WINDOW_UNUSED_CUDA = (
    "SmolLM2-135M loops 19-66 tokens into the code-edit generations and drafts from its own "
    "recent text: the context sweep's 64-token requests commit 2.2 tokens a step at 256 and 1.7 "
    "at 2700 with --draft-window 1024 and without it alike (H200 matrix, 2026-12-03)"
)
NULL_ON_WORKLOAD: dict[tuple[str, str, str], str] = {
    ("cuda", "window", "code-edit"): WINDOW_UNUSED_CUDA,
    ("cpu", "window", "code-edit"): LOOPING_CPU,
}


def null_reason(size: Size, device: str, row: str, workload: str | None) -> str | None:
    """Why a row's fault cannot show in a run (right = the clean diagnosis), or None: the
    size's null rows on the row's own workload, or a null measured on the run's workload."""
    own = ROWS_BY_NAME[row].workload if row in ROWS_BY_NAME else None
    if workload is None or workload == own:
        return size.null_rows.get(row)
    return NULL_ON_WORKLOAD.get((device, row, workload))


SIZES: dict[str, Size] = {
    # The H200: diagnose's defaults (2700 -> 1500). The quick plan's context sweep runs at 256,
    # 2700 and 4200 (64 tokens each), so W=1024 sits between the first two: the drafter sees
    # the whole context at 256 and under 40% of it from 2700 on. 0.5 us per token so far adds
    # ~0.75 ms to a step by the end of 1500 tokens.
    "cuda": Size(
        2700,
        1500,
        host_us=0.5,
        window=1024,
    ),
    # This 2-core CPU (SmolLM2-135M at ~13 tok/s, ~75 ms a step): a short plan (~1.5-2 min,
    # precision repeats off, every measurement twice). 150 us per token so far is ~38 ms a step
    # (half a step) by token 256. Prompt 192 -> 256 tokens puts the quick sweep at 192, 256 and
    # 448: its 256 point reaches context 320 and its 448 point starts there, so W=384 lies 64
    # tokens clear of both (192 -> 192 would leave 320..384, 32 either side, and the drafter
    # would lose only 32 tokens at 384); the full generation crosses W at token 192, 64 before
    # its end.
    # 500 us per token so far adds ~130 ms (nearly two steps) by token 256: the drift test's
    # interval over two requests' 64-step blocks is +-30% of the mean step when three servers
    # share the two cores, +-12% idle: a drift of ~+60% that noise cannot hide.
    "cpu": Size(
        192,
        256,
        host_us=500.0,
        window=384,
        precision=0.0,
        repeat=2,
        null_rows={
            "detok-full": "re-detokenizing the whole output costs ~21x the incremental "
            "detokenizer at token 256 (bench/detok_cost.py), tens of microseconds: under 0.1% "
            "of a ~75 ms CPU step, below the noise",
            "position": LOOPING_CPU,
            "graph-off": NO_GRAPHS_CPU,
        },
    ),
}


def sweep_spans(size: Size) -> list[tuple[int, int]]:
    """The contexts each request of the quick plan's context sweep covers (prompt, prompt +
    generated) against a server that states the size's window (the window row's), from the
    plan itself, so a change of the plan shows up here."""
    from specscope.experiments import diagnosis_plan
    from specscope.trace import tags

    plan = diagnosis_plan.build(
        size.prompt_tokens, size.max_tokens, quick=True, precision=0.0, draft_window=size.window
    )
    return sorted(
        (s.prompt_tokens, s.prompt_tokens + s.max_tokens)
        for s in plan.steps
        if s.experiment == tags.CONTEXT_SWEEP
    )


def window_gap(size: Size) -> tuple[int, int] | None:
    """(room below, room above) the window between the sweep's spans; None when no span lies
    wholly below it or none wholly above it (the sweep could not show a cliff at W)."""
    spans = sweep_spans(size)
    below = [end for _, end in spans if end < size.window]
    above = [start for start, _ in spans if start > size.window]
    if not below or not above:
        return None
    return size.window - max(below), min(above) - size.window


def serve_argv(row: Row, size: Size, device: str, log_file: Path | None = None) -> list[str]:
    """`specscope serve` for one row: the engine on a free loopback port, the row's flags."""
    fill = {"host_us": f"{size.host_us:g}", "window": size.window, "graph_batch": size.graph_batch}
    flags = [f.format(**fill) for f in row.serve]
    argv = [*SPECSCOPE, "serve", "--backend", "engine", "--device", device, "--port", "0"]
    argv += flags
    if log_file is not None:
        argv += ["--log-file", str(log_file)]
    return argv


def diagnose_argv(row: Row, size: Size, url: str, run_dir: Path) -> list[str]:
    """`specscope diagnose` as a user would run it: quick, requests ending at end of turn."""
    return [
        *SPECSCOPE,
        "diagnose",
        url,
        "--quick",
        "--no-ignore-eos",
        "--workload",
        row.workload,
        "--json",
        "--out",
        str(run_dir),
        *size.diagnose_flags(),
        *(["--concurrency", size.concurrency] if row.load else []),
    ]


@dataclass
class Outcome:
    """One diagnosis of one seeded server. `error` set: the run failed (one line, why)."""

    row: str
    repeat: int
    device: str
    top_cause: str | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)  # id, cause, candidates, ...
    speculation: str | None = None
    decode_tps: float | None = None
    wall_s: float = 0.0
    error: str | None = None
    run_dir: str | None = None
    # the fault cannot show on this device (the figure says why): expect the clean diagnosis
    null_reason: str | None = None
    workload: str = ""  # the workload it ran (the row's, or bench/fault_matrix.py --workload)

    @property
    def finding_ids(self) -> list[str]:
        return [str(f.get("id")) for f in self.findings]

    @property
    def causes(self) -> list[str | None]:
        return [f.get("cause") for f in self.findings]

    def column(self) -> str:
        """The confusion table's column: the top cause, or that the run failed."""
        if self.error is not None:
            return ERROR_COLUMN
        return self.top_cause or NO_CAUSE


def is_right(row: Row, outcome: Outcome) -> bool:
    """Whether the diagnosis names the row's cause (a failed run never does)."""
    if outcome.error is not None:
        return False
    if outcome.null_reason is not None:
        row = clean_row(row)
    top_ok = (outcome.top_cause in row.expected) != row.negate
    if not row.every_finding:
        return top_ok
    return top_ok and all(c in row.expected for c in outcome.causes)


def _finding(f: dict[str, Any]) -> dict[str, Any]:
    """A finding's id and cause fields; `candidates` / `ruled_out` only where diagnose has them
    (they are being added to the contract: older output has neither)."""
    out: dict[str, Any] = {"id": f.get("id"), "cause": f.get("cause")}
    if isinstance(f.get("candidates"), list):
        out["candidates"] = [str(c) for c in f["candidates"]]
    if isinstance(f.get("ruled_out"), list):
        out["ruled_out"] = [
            {"id": r.get("id"), "reason": r.get("reason")}
            for r in f["ruled_out"]
            if isinstance(r, dict)
        ]
    return out


def read_diagnosis(text: str, outcome: Outcome) -> Outcome:
    """Fill `outcome` from diagnose's `--json` stdout; bad JSON is an error, not an exception."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        outcome.error = f"diagnose printed no JSON object ({exc.msg} at char {exc.pos})"
        return outcome
    if not isinstance(data, dict):
        outcome.error = f"diagnose printed JSON {type(data).__name__}, not an object"
        return outcome
    raw = data.get("findings") or []
    outcome.findings = [_finding(f) for f in raw if isinstance(f, dict)]
    first = outcome.findings[0].get("cause") if outcome.findings else None
    outcome.top_cause = str(first) if first is not None else None
    outcome.speculation = data.get("speculation")
    tps = data.get("decode_tps")
    outcome.decode_tps = float(tps) if isinstance(tps, int | float) else None
    outcome.run_dir = data.get("run_dir") or outcome.run_dir
    return outcome


def _last_line(text: str | None, default: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else default


class RunError(Exception):
    """A run that failed: its message is the one line the outcome records."""


class Server:
    """A `specscope serve` subprocess whose output is drained by a thread (a full pipe would
    block the server), watched for the listening line, its last lines kept for errors."""

    def __init__(self, argv: list[str]):
        self.tail: deque[str] = deque(maxlen=20)
        self._url: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
        )
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip()
            if line:
                self.tail.append(line)
            m = LISTENING.search(line)
            if m:
                self._url.put(m.group(1))
        self._url.put(None)  # EOF: the server exited

    def wait_url(self, timeout_s: float) -> str:
        """The URL it listens on, or RunError if it exits or stays silent past `timeout_s`."""
        try:
            url = self._url.get(timeout=timeout_s)
        except queue.Empty:
            raise RunError(
                f"server not listening after {timeout_s:.0f} s: "
                + (self.tail[-1] if self.tail else "no output")
            ) from None
        if url is None:
            rc = self.proc.wait()
            last = self.tail[-1] if self.tail else "no output"
            raise RunError(f"server exited (rc {rc}) before listening: {last}")
        return url

    def stop(self) -> None:
        """Terminate, then kill if it will not go: never leave a server behind."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _diagnose(argv: list[str], timeout_s: float, outcome: Outcome) -> Outcome:
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RunError(f"diagnose did not finish within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise RunError(
            f"diagnose exit {done.returncode}: "
            + _last_line(done.stderr, _last_line(done.stdout, "no output"))
        )
    return read_diagnosis(done.stdout, outcome)


def run_row(
    row: Row, size: Size, device: str, out_dir: Path, timeout_s: float, repeat: int = 0
) -> Outcome:
    """Serve the row's fault, diagnose it, stop the server. Files go to out_dir/ROW-REPEAT/
    (server.log, the diagnose run directory). Never raises for a failed run; Ctrl-C still
    stops the server, then propagates."""
    work = out_dir / f"{row.name}-{repeat}"
    outcome = Outcome(
        row.name,
        repeat,
        device,
        run_dir=str(work / "diagnose"),
        null_reason=null_reason(size, device, row.name, row.workload),
        workload=row.workload,
    )
    t0 = time.perf_counter()
    server: Server | None = None
    try:
        work.mkdir(parents=True, exist_ok=True)
        server = Server(serve_argv(row, size, device, work / "server.log"))
        url = server.wait_url(START_TIMEOUT_S)
        _diagnose(diagnose_argv(row, size, url, work / "diagnose"), timeout_s, outcome)
    except RunError as exc:
        outcome.error = str(exc)
    except OSError as exc:
        outcome.error = f"cannot run: {exc.strerror or exc}"
    finally:
        if server is not None:
            server.stop()
        outcome.wall_s = time.perf_counter() - t0
    return outcome


def confusion_table(outcomes: list[Outcome]) -> str:
    """Rows: the seeded fault (table order); columns: the top causes seen (no cause first,
    failed runs last), with counts; then right/total against the row's expected set."""
    names = [r.name for r in ROWS if any(o.row == r.name for o in outcomes)]
    names += sorted({o.row for o in outcomes} - set(names))
    seen = {o.column() for o in outcomes}
    middle = sorted(seen - {NO_CAUSE, ERROR_COLUMN})
    cols = [c for c in (NO_CAUSE, *middle, ERROR_COLUMN) if c in seen]
    width = max([len("seeded fault"), *map(len, names)])
    lines = [" ".join([f"{'seeded fault':<{width}}", *cols, "right"])]
    for name in names:
        mine = [o for o in outcomes if o.row == name]
        counts = Counter(o.column() for o in mine)
        row = ROWS_BY_NAME.get(name)
        right = sum(is_right(row, o) for o in mine) if row else 0
        cells = [f"{counts[c] or '.':>{len(c)}}" for c in cols]
        lines.append(" ".join([f"{name:<{width}}", *cells, f"{right}/{len(mine)}"]))
    return "\n".join(lines)


def clean_findings(outcomes: list[Outcome]) -> str:
    """What the diagnosis said about the clean rows, run by run: every finding and its cause
    (a clean server's findings are the false alarms to read)."""
    clean = {r.name for r in ROWS if r.clean}
    lines = []
    for o in outcomes:
        if o.row not in clean:
            continue
        if o.error is not None:
            said = f"error: {o.error}"
        elif not o.findings:
            said = "no findings"
        else:
            said = ", ".join(f"{f.get('id')} ({f.get('cause') or 'no cause'})" for f in o.findings)
        lines.append(f"  {o.row} #{o.repeat}: {said}")
    return "\n".join(lines)


def summary(outcomes: list[Outcome], wall_s: float) -> str:
    """The whole report: the confusion table, the clean rows' findings, the share right."""
    right = sum(is_right(ROWS_BY_NAME[o.row], o) for o in outcomes if o.row in ROWS_BY_NAME)
    share = f"{right / len(outcomes):.0%}" if outcomes else "-"
    parts = [confusion_table(outcomes)]
    clean = clean_findings(outcomes)
    if clean:
        parts += ["findings on the clean rows:", clean]
    null = {o.row: o.null_reason for o in outcomes if o.null_reason is not None}
    if null:
        parts += [
            "faults that cannot show here (right = the clean diagnosis of the row's drafter):"
        ]
        parts += [f"  {name}: {why}" for name, why in null.items()]
    errors = [f"  {o.row} #{o.repeat}: {o.error}" for o in outcomes if o.error is not None]
    if errors:
        parts += ["failed runs:", *errors]
    parts.append(f"overall right: {right}/{len(outcomes)} ({share})")
    parts.append(f"total wall time: {wall_s:.0f} s")
    return "\n".join(parts)


def outcome_from_json(d: dict[str, Any]) -> Outcome:
    """One outcome back from `outcomes_json` (a resumed matrix keeps the runs it has), the
    verdict fields it adds left out: they are recomputed from the row."""
    names = {f.name for f in fields(Outcome)}
    return Outcome(**{k: v for k, v in d.items() if k in names})


def outcomes_json(
    outcomes: list[Outcome], size: Size, device: str, wall_s: float
) -> dict[str, Any]:
    """Everything a run found, for bench/*.json: the sizes, every outcome, each one's verdict."""
    runs = []
    for o in outcomes:
        d = asdict(o)
        d["finding_ids"] = o.finding_ids
        d["right"] = is_right(ROWS_BY_NAME[o.row], o) if o.row in ROWS_BY_NAME else False
        runs.append(d)
    return {
        "device": device,
        "size": asdict(size),
        "rows": {
            r.name: {
                "serve": list(r.serve),
                "workload": r.workload,
                "expected": sorted(r.expected, key=lambda c: c or ""),
                "negate": r.negate,
                "every_finding": r.every_finding,
                "load": r.load,
            }
            for r in ROWS
            if any(o.row == r.name for o in outcomes)
        },
        "right": sum(bool(d["right"]) for d in runs),
        "total": len(runs),
        "wall_s": round(wall_s, 1),
        "outcomes": runs,
    }
