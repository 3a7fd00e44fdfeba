"""The one typer app. Commands are thin: parse arguments, call a layer, render.

Each command's body lives in `specscope.commands.<name>` so that it stays small and readable;
this module only wires them together. Flags, names and JSON keys follow ARCHITECTURE.md §8.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, NoReturn

import typer

from specscope.commands import compare, diagnose, logs, probe, report, runs, serve, watch
from specscope.commands.common import JSON_ERRORS, err_console, say_error

app = typer.Typer(
    name="specscope",
    help="Why is my speculative-decoding tokens/s what it is, and what changed?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(show: bool) -> None:
    """`specscope --version`: the installed package's version, then exit (a bug report names it)."""
    if not show:
        return
    try:
        typer.echo(f"specscope {version('specscope')}")
    except PackageNotFoundError:  # run from a source tree that was never installed
        typer.echo("specscope (not installed: version unknown)")
    raise typer.Exit(0)


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit", callback=_version, is_eager=True
        ),
    ] = False,
) -> None:
    """Why is my speculative-decoding tokens/s what it is, and what changed?"""


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
app.command("watch", help="Watch a live server: canary, counters, logs; alert on a change.")(
    watch.watch
)


def _takes_text(param: Any) -> bool:
    """An option or argument that takes plain text (typer 0.29 keeps the annotation; click the
    type)."""
    if getattr(param, "param_type_name", None) not in ("option", "argument"):
        return False
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None:
        return getattr(descriptor, "annotation", None) in (str, str | None)
    return getattr(getattr(param, "type", None), "name", None) == "text"


def _no_tag(ctx: Any = None) -> None:
    """The type column of an argument whose name says what it is."""
    return None


def _plain_metavars(command: Any) -> Any:
    """Help without typer's type tags where they mislead: typer (0.29) prints `<bool>` beside
    every on/off flag (as if it took a value) and `<str>` beside text options (which says
    nothing); a flag shows no tag and a text option its own name (`--workload WORKLOAD`)."""
    for param in command.params:
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif param.metavar is None and _takes_text(param):
            param.metavar = (param.name or "value").upper()
            if param.param_type_name == "argument":  # its name is its column already
                param.display_type_rich = _no_tag
    command.get_help_option = _untagged(command.get_help_option)  # --help: made per context
    for sub in getattr(command, "commands", {}).values():
        _plain_metavars(sub)
    return command


def _untagged(make_option: Any) -> Any:
    """`--help` as the command makes it, without a type tag."""

    def make(ctx: Any) -> Any:
        option = make_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    return make


# click's exception base, wherever typer takes click from (0.29 vendors its own copy)
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _usage_error(e: Any) -> NoReturn:
    """A usage error as one line on stderr (`error: ...`), the command's help hint after it;
    with `--json` also one JSON object on stdout ({"error", "exit_code"}). No arguments at all
    is not an error but a request for help: the help, as typer prints it."""
    if type(e).__name__ == "NoArgsIsHelpError":
        e.show()
        sys.exit(e.exit_code)
    say_error(e.format_message(), e.exit_code)
    ctx = getattr(e, "ctx", None)
    if ctx is not None:
        err_console.print(f"see '{ctx.command_path} --help'", highlight=False)
    sys.exit(e.exit_code)


def main(argv: list[str] | None = None) -> None:
    """The console script: typer's app, with usage errors (unknown option, bad value, missing
    file) said in one line like every other error, and with `--json` also as one JSON object
    on stdout, so that a program driving specscope always has an object to read."""
    args = sys.argv[1:] if argv is None else argv
    JSON_ERRORS["on"] = "--json" in args
    command = _plain_metavars(typer.main.get_command(app))
    try:
        code = command.main(args, prog_name="specscope", standalone_mode=False)
    except _ClickException as e:
        _usage_error(e)
    except typer.Abort:
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
