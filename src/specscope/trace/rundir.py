"""The run directory: `run.json`, `requests.jsonl`, `telemetry.jsonl`, `analysis.json`.

Requests are appended and flushed one line per finished request, so a crash or Ctrl-C loses
nothing already measured; the reader accepts a run whose last line was cut mid-write.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from specscope import __version__
from specscope.trace.model import SCHEMA_VERSION, RequestTrace, Run, RunInfo
from specscope.trace.text import scrub_tree

RUN_JSON = "run.json"
REQUESTS_JSONL = "requests.jsonl"
TELEMETRY_JSONL = "telemetry.jsonl"
ANALYSIS_JSON = "analysis.json"
CLIENT_JSONL = "client.jsonl"  # the client's loop-lag samples, one line per worker
REPORT_HTML = "report.html"


def runs_home() -> Path:
    """Where runs are kept unless `--out` says otherwise: `SPECSCOPE_HOME`, else
    ./specscope-runs. Read at call time, so that the writer and the run index always agree."""
    return Path(os.environ.get("SPECSCOPE_HOME", "specscope-runs"))


class RunDirError(Exception):
    """A run directory that cannot be read: missing, not a run, or unreadable run.json."""


def new_run_id(kind: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}-{secrets.token_hex(3)}"


def _atomic_write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(
        json.dumps(scrub_tree(obj), indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8"
    )
    os.replace(tmp, path)


def trace_line(trace: RequestTrace) -> str:
    """A trace as its `requests.jsonl` line (also what a probe worker ships to its driver)."""
    try:
        return trace.model_dump_json(by_alias=True)
    except PydanticSerializationError:  # text no UTF-8 writer takes: keep it, escaped
        return json.dumps(scrub_tree(trace.model_dump(mode="json", by_alias=True)))


class RunDirWriter:
    """Writes one run directory. Use as a context manager, or call `close(status)`."""

    def __init__(self, path: Path | str | None, info: RunInfo):
        if path is None:
            path = runs_home() / (info.run_id or new_run_id(info.kind))
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        if not info.run_id:
            info.run_id = self.path.name
        if not info.tool_version:
            info.tool_version = __version__
        if not info.started_unix:
            info.started_unix = time.time()
            info.started_perf_ns = time.perf_counter_ns()
        self.info = info
        self._requests = open(self.path / REQUESTS_JSONL, "a", encoding="utf-8")  # noqa: SIM115
        self._telemetry = open(self.path / TELEMETRY_JSONL, "a", encoding="utf-8")  # noqa: SIM115
        self.write_info()

    def write_info(self) -> None:
        _atomic_write_json(self.path / RUN_JSON, self.info.model_dump(mode="json", by_alias=True))

    def append_request(self, trace: RequestTrace) -> None:
        self._requests.write(trace_line(trace) + "\n")
        self._requests.flush()

    def append_telemetry(self, records: Iterable[dict[str, Any]]) -> None:
        for rec in records:
            line = dict(rec)
            line.setdefault("schema", SCHEMA_VERSION)
            self._telemetry.write(json.dumps(scrub_tree(line), default=str) + "\n")
        self._telemetry.flush()

    def append_client(self, record: dict[str, Any]) -> None:
        """One worker's loop-lag samples (probe.health.LoopLagMonitor.record)."""
        with open(self.path / CLIENT_JSONL, "a", encoding="utf-8") as f:
            f.write(json.dumps({"schema": SCHEMA_VERSION, **record}) + "\n")

    def write_analysis(self, analysis: dict[str, Any]) -> None:
        payload = {"schema": SCHEMA_VERSION, **analysis}
        _atomic_write_json(self.path / ANALYSIS_JSON, payload)

    def close(self, status: str = "complete", reason: str = "") -> None:
        self.info.status = status  # type: ignore[assignment]
        self.info.status_reason = reason
        self.info.ended_unix = time.time()
        self.write_info()
        for f in (self._requests, self._telemetry):
            if not f.closed:
                f.close()

    def __enter__(self) -> RunDirWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.info.ended_unix is not None:
            return
        if exc_type is KeyboardInterrupt:
            self.close("partial", "interrupted (Ctrl-C)")
        elif exc_type is not None:
            self.close("partial", f"stopped by {exc_type.__name__}: {exc}")
        else:
            self.close("complete")


class RunDirReader:
    """Reads a run directory, tolerating a partial run (no end time, a cut last line)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        if not self.path.is_dir():
            raise RunDirError(f"run directory not found: {self.path}")
        if not (self.path / RUN_JSON).is_file():
            raise RunDirError(f"not a specscope run directory (no {RUN_JSON}): {self.path}")

    def info(self) -> RunInfo:
        try:
            raw = (self.path / RUN_JSON).read_text(encoding="utf-8", errors="replace")
            try:
                return RunInfo.model_validate_json(raw)
            except ValidationError:
                # JSON escapes of lone surrogates (`"\ud83d"`, as json.dumps writes them) are
                # valid JSON that pydantic's parser refuses: read them as escape text instead.
                return RunInfo.model_validate(scrub_tree(json.loads(raw)))
        except (ValidationError, ValueError, OSError, RecursionError) as e:
            raise RunDirError(
                f"unreadable {RUN_JSON} in {self.path}: {e.__class__.__name__}"
            ) from e

    def _jsonl(self, name: str) -> tuple[list[dict[str, Any]], int]:
        return read_jsonl(self.path / name)

    def requests(self) -> tuple[list[RequestTrace], int]:
        rows, bad = self._jsonl(REQUESTS_JSONL)
        out: list[RequestTrace] = []
        for row in rows:
            try:
                out.append(RequestTrace.model_validate(row))
            except ValidationError:
                bad += 1
        # Appended as each request ended (concurrent ones finish in any order): request order.
        out.sort(key=lambda t: t.index)
        return out, bad

    def telemetry(self) -> tuple[list[dict[str, Any]], int]:
        return self._jsonl(TELEMETRY_JSONL)

    def client(self) -> tuple[list[dict[str, Any]], int]:
        return self._jsonl(CLIENT_JSONL)

    def analysis(self) -> dict[str, Any] | None:
        path = self.path / ANALYSIS_JSON
        if not path.is_file():
            return None
        try:
            obj = json.loads(path.read_text())
        except (json.JSONDecodeError, OSError):
            return None
        return obj if isinstance(obj, dict) else None

    def load(self) -> Run:
        info = self.info()
        reqs, bad_r = self.requests()
        tel, bad_t = self.telemetry()
        client, bad_c = self.client()
        if info.status == "running":
            # Never closed: the process died or was killed. What is here is a partial run.
            info.status = "partial"
            info.status_reason = info.status_reason or "run was not closed (process stopped)"
        return Run(
            info=info,
            requests=reqs,
            telemetry=tel,
            client=client,
            analysis=self.analysis(),
            malformed_lines=bad_r + bad_t + bad_c,
        )


def load_run(path: Path | str) -> Run:
    return RunDirReader(path).load()


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSON-lines file (none when it is missing) and how many lines were
    not one (a line cut by a crash mid-write is counted, never fatal); a lone surrogate in a
    line is read as escape text."""
    rows: list[dict[str, Any]] = []
    bad = 0
    if not path.is_file():
        return rows, bad
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                bad += 1
                continue
            if "\\ud" in line or "\\uD" in line:  # maybe a lone surrogate: escape text
                obj = scrub_tree(obj)
            if isinstance(obj, dict):
                rows.append(obj)
            else:
                bad += 1
    return rows, bad
