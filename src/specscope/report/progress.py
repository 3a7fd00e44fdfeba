"""Progress on stderr while a command measures: probe's transient bar (requests done, how many
failed) and diagnose's bar over the plan (tokens generated, requests, the last error). The
commands only wire these to the entry points' progress hooks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from specscope.trace.model import RequestTrace


@contextlib.contextmanager
def request_progress(total: int, console: Console) -> Iterator[Callable[[RequestTrace], None]]:
    """A transient bar: requests done, and how many failed; yields the per-request callback."""
    with Progress(
        TextColumn("[bold]probe[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("probe", total=total, status="")
        failures = 0

        def on_done(trace: RequestTrace) -> None:
            nonlocal failures
            failures += trace.error is not None
            progress.update(
                task, advance=1, status=f"[red]{failures} failed[/]" if failures else ""
            )

        yield on_done


class _Step(Protocol):
    @property
    def tag(self) -> str: ...


class StepEvent(Protocol):
    """What the bar reads of an executor progress event (experiments.Progress)."""

    @property
    def step_index(self) -> int: ...
    @property
    def step(self) -> _Step: ...
    @property
    def requests_done(self) -> int: ...
    @property
    def requests_total(self) -> int: ...
    @property
    def tokens_done(self) -> int: ...
    @property
    def tokens_total(self) -> int: ...
    @property
    def last(self) -> RequestTrace | None: ...


class PlanProgressBar:
    """Turns executor progress events into a bar (tokens generated so far); a context manager,
    and the per-event callback once entered."""

    def __init__(self, console: Console, enabled: bool):
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} tok"),
            TextColumn("{task.fields[reqs]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
            disable=not enabled,
        )
        self.task: Any = None

    def __enter__(self) -> PlanProgressBar:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)  # type: ignore[arg-type]

    def __call__(self, ev: StepEvent) -> None:
        if self.task is None:
            self.task = self.progress.add_task(ev.step.tag, total=ev.tokens_total, reqs="")
        elif ev.step_index == 0 and ev.requests_done == 0:  # a new plan: the precision repeats
            self.progress.reset(self.task, total=ev.tokens_total)
        errors = (
            "" if ev.last is None or ev.last.error is None else f" last error: {ev.last.error.kind}"
        )
        self.progress.update(
            self.task,
            description=ev.step.tag,
            completed=ev.tokens_done,
            reqs=f"{ev.requests_done}/{ev.requests_total} req{errors}",
        )
