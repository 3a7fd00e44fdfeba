"""Run history: a SQLite index (stdlib sqlite3) over run directories.

The run directories are the truth; the index is a cache that can be rebuilt from them at any
time (`rescan`), so a deleted or corrupted index loses nothing: a file that is not a SQLite
database is replaced by a fresh index (and a warning says so). It lives at
`$SPECSCOPE_HOME/index.sqlite` (default `./specscope-runs`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specscope.trace.rundir import RunDirError, RunDirReader, runs_home

INDEX_FILE = "index.sqlite"


class RunHomeError(Exception):
    """The runs home cannot hold an index (it is a file, or cannot be created); one line."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    path TEXT PRIMARY KEY,
    run_id TEXT,
    kind TEXT,
    endpoint TEXT,
    model TEXT,
    started REAL,
    status TEXT,
    decode_tps REAL,
    mean_commit_len REAL,
    mean_step_s REAL
)
"""


@dataclass
class RunRow:
    path: str
    run_id: str
    kind: str
    endpoint: str
    model: str | None
    started: float
    status: str
    decode_tps: float | None
    mean_commit_len: float | None
    mean_step_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _num(obj: dict[str, Any] | None, key: str) -> float | None:
    if not obj:
        return None
    v = obj.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _probe_summary(run_dir: Path) -> dict[str, Any] | None:
    """`summary.json`'s `summary` object (written by `specscope probe`), None when absent or bad."""
    try:
        obj = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    summary = obj.get("summary") if isinstance(obj, dict) else None
    return summary if isinstance(summary, dict) else None


def row_from_dir(run_dir: Path | str) -> RunRow:
    """Summarise one run dir (raises RunDirError when it is not one)."""
    reader = RunDirReader(run_dir)
    info = reader.info()
    # A diagnosis has analysis.json; a plain probe run has only its summary.json.
    analysis = reader.analysis() or _probe_summary(Path(run_dir))
    status = info.status
    requests, errors = _num(analysis, "requests"), _num(analysis, "errors")
    if status == "complete" and requests and errors == requests:
        status = "failed"  # it ran to its end, and not one request succeeded
    return RunRow(
        path=str(Path(run_dir).resolve()),
        run_id=info.run_id,
        kind=info.kind,
        endpoint=info.endpoint,
        model=info.model,
        started=info.started_unix,
        status=status,
        decode_tps=_num(analysis, "decode_tps"),
        mean_commit_len=_num(analysis, "mean_commit_len"),
        mean_step_s=_num(analysis, "mean_step_s"),
    )


class RunIndex:
    def __init__(self, home: Path | str | None = None):
        self.home = Path(home) if home is not None else runs_home()
        self.path = self.home / INDEX_FILE
        #: What went wrong and was repaired (a corrupt index rebuilt), for the command to show.
        self.warnings: list[str] = []

    def _connect(self) -> sqlite3.Connection:
        if self.home.exists() and not self.home.is_dir():
            raise RunHomeError(f"runs home {self.home} (SPECSCOPE_HOME) is a file, not a directory")
        try:
            self.home.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunHomeError(
                f"runs home {self.home} (SPECSCOPE_HOME) cannot be created: {e.strerror or e}"
            ) from None
        try:
            con = sqlite3.connect(self.path, timeout=10)
        except sqlite3.Error as e:
            raise RunHomeError(f"run index {self.path} cannot be opened: {e}") from None
        try:
            con.execute(_SCHEMA)
            con.execute("SELECT path FROM runs LIMIT 1").fetchall()
        except sqlite3.DatabaseError as e:
            con.close()
            if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                raise RunHomeError(f"run index {self.path} is locked: {e}") from None
            # A cache, rebuilt from the run dirs by `rescan`: replace it rather than fail.
            self.warnings.append(
                f"run index {self.path} was unreadable ({e}); rebuilt it from the run directories"
            )
            try:
                self.path.unlink()
                con = sqlite3.connect(self.path, timeout=10)
                con.execute(_SCHEMA)
            except (OSError, sqlite3.Error) as e2:
                raise RunHomeError(
                    f"run index {self.path} is corrupt and cannot be replaced: {e2}"
                ) from None
        return con

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        con = self._connect()
        try:
            yield con
            con.commit()
        finally:
            con.close()

    def add(self, run_dir: Path | str) -> RunRow:
        row = row_from_dir(run_dir)
        d = row.to_dict()
        with self._db() as con:
            con.execute(
                f"INSERT OR REPLACE INTO runs ({', '.join(d)}) VALUES ({', '.join('?' * len(d))})",
                list(d.values()),
            )
        return row

    def rescan(self, extra: list[Path] | None = None) -> int:
        """Index every run dir directly under home (and `extra`); drop rows whose dir is gone."""
        found = 0
        candidates = [p for p in self.home.iterdir() if p.is_dir()] if self.home.is_dir() else []
        for p in [*candidates, *(extra or [])]:
            try:
                self.add(p)
                found += 1
            except RunDirError:
                continue
        with self._db() as con:
            gone = [r[0] for r in con.execute("SELECT path FROM runs") if not Path(r[0]).is_dir()]
            con.executemany("DELETE FROM runs WHERE path = ?", [(g,) for g in gone])
        return found

    def list(self) -> list[RunRow]:
        with self._db() as con:
            cur = con.execute(
                "SELECT path, run_id, kind, endpoint, model, started, status, decode_tps, "
                "mean_commit_len, mean_step_s FROM runs ORDER BY started DESC"
            )
            return [RunRow(*r) for r in cur.fetchall()]
