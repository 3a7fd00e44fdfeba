"""Run history (SQLite index over run dirs) and comparison of two runs."""

from specscope.store.index import RunIndex, RunRow, runs_home

__all__ = ["RunIndex", "RunRow", "runs_home"]
