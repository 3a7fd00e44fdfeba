"""The one-line notices the commands print on stderr around their output: the embedded server
diagnose started, an interrupted run, where a run and its reports were written, and the
address `serve` listens on. Paths are printed as they are (never markup, never highlighted);
server text is untrusted."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from specscope.report.text import untrusted


def render_embedded_server(
    description: str, url: str, notes: Sequence[str], console: Console
) -> None:
    """The embedded server diagnose started without a URL, and why a fallback was taken."""
    console.print(untrusted(f"embedded server: {description} at {url}"), highlight=False)
    for n in notes:
        console.print(untrusted(f"note: {n}"), highlight=False)


def render_interrupted(console: Console) -> None:
    """Ctrl-C during diagnose's plan or a probe's requests: what was measured is kept."""
    console.print("interrupted: keeping what was measured", markup=False)


def render_partial_probe(console: Console) -> None:
    """Above a probe's summary after Ctrl-C: whose figures these are."""
    console.print(
        "PARTIAL RUN — interrupted (Ctrl-C): the figures cover what was measured before it; "
        "the requests in flight are kept as cancelled.",
        markup=False,
        style="bold yellow",
    )


def _path_line(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False)


def render_run_written(run_dir: Path, html_path: Path, elapsed_s: float, console: Console) -> None:
    """Where diagnose wrote its run, analysis and HTML report, and how long it took."""
    _path_line(console, f"run dir: {run_dir}")
    _path_line(console, f"analysis: {run_dir / 'analysis.json'}")
    _path_line(console, f"HTML report: {html_path}  ({elapsed_s:.0f} s)")


def render_written(what: str, paths: Sequence[Path], console: Console) -> None:
    """`WHAT: PATH[, PATH]`: a report (`HTML report`, `Markdown report`) or files (`CSV`) written."""
    _path_line(console, f"{what}: {', '.join(str(p) for p in paths)}")


def render_listening(backend: str, url: str, console: Console) -> None:
    """`specscope serve`'s announce line, once the server accepts connections."""
    console.print(untrusted(f"specscope serve: {backend} listening on {url}"), highlight=False)
