"""The one typer app. Commands are thin: parse arguments, call a layer, render.

Each command's body lives in `specscope.commands.<name>` so that it stays small and readable;
this module only wires them together. Flags, names and JSON keys follow ARCHITECTURE.md §8.
"""

from __future__ import annotations

import typer

from specscope.commands import compare, diagnose, logs, probe, report, runs, serve

app = typer.Typer(
    name="specscope",
    help="Why is my speculative-decoding tokens/s what it is, and what changed?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.command("probe", help="Measure a server: stream requests, time every chunk.")(probe.probe)
app.command("logs", help="Read what a server logged about speculation.")(logs.logs)
app.command("diagnose", help="Explain a server's tokens/s (embedded default without URL).")(
    diagnose.diagnose
)
app.command("compare", help="Compare two runs: tps ratio split into acceptance and step time.")(
    compare.compare
)
app.command("report", help="Re-render a run's report (HTML, Markdown).")(report.report)
app.command("serve", help="Serve the twin or the engine as an OpenAI-compatible server.")(
    serve.serve
)
app.command("runs", help="List measured runs.")(runs.runs)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
