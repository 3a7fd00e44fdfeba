"""`specscope watch URL`: continuous diagnosis of a live server (issue #40, docs/watch.md).
Parses the options, builds the watch (watch/loop.py) and hands every event to the renderers
(report/watch_events.py: JSON lines; report/watch_terminal.py: the terminal) and the run
directory. Exit codes: 0 at the end of --duration, 130 on Ctrl-C (after the summary), 2 for bad
input, 1 for a server that does not answer at start."""

from __future__ import annotations

import asyncio
import shlex
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from specscope.commands.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    err_console,
    fail_usage,
    say_error,
)
from specscope.probe.endpoint import EndpointError, parse_endpoint
from specscope.report.watch_events import Event, write_event
from specscope.report.watch_terminal import WatchView
from specscope.watch.baseline import BaselineError, references
from specscope.watch.canary import WatchStartError
from specscope.watch.exporter import Exporter
from specscope.watch.loop import Watch
from specscope.watch.options import WatchOptionError, WatchOptions
from specscope.watch.rundir import WatchRunDir


def _options(url: str, given: dict[str, Any]) -> WatchOptions:
    """WatchOptions from the flags; any bad value is one line, exit 2."""
    try:
        endpoint = parse_endpoint(url)
    except EndpointError as e:
        fail_usage(str(e))
    argv = _split("--alert-cmd", given.pop("alert_cmd"))
    given["logs_cmd"] = _split("--logs-cmd", given["logs_cmd"])
    if given["logs"] is not None and given["logs"].is_dir():
        fail_usage(f"--logs {given['logs']}: is a directory, expected a log file")
    try:
        return WatchOptions(url=endpoint.url, auth=endpoint.auth, alert_cmd=argv, **given)
    except WatchOptionError as e:
        fail_usage(str(e))


def _split(flag: str, text: str | None) -> tuple[str, ...]:
    """A command line split as a shell would split it (it then runs without one)."""
    try:
        return tuple(shlex.split(text or ""))
    except ValueError as e:
        fail_usage(f"{flag}: cannot split into arguments ({e})")


def _sink(json_: bool, run_dir: WatchRunDir | None, exporter: Exporter | None) -> Any:
    view = None if json_ else WatchView(err_console)

    def sink(event: Event) -> None:
        if run_dir is not None:
            run_dir.write(event)
        if exporter is not None:
            exporter.update(event)
        if view is None:
            write_event(event, sys.stdout)
        else:
            view.render(event)

    return sink


def watch(
    url: Annotated[str, typer.Argument(help="Server base URL, e.g. http://127.0.0.1:30000")],
    metrics_url: Annotated[
        str | None, typer.Option(help="The server's Prometheus /metrics, scraped every window")
    ] = None,
    logs: Annotated[Path | None, typer.Option(help="A server log file to tail")] = None,
    logs_cmd: Annotated[
        str | None, typer.Option(help="A command printing the server log as it comes (no shell)")
    ] = None,
    probe_every: Annotated[float, typer.Option(help="Seconds between canaries (0: none)")] = 10.0,
    interval: Annotated[float, typer.Option(help="Seconds per window event")] = 10.0,
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds")] = None,
    warmup: Annotated[float, typer.Option(help="Seconds of warm-up baseline")] = 60.0,
    baseline: Annotated[
        Path | None,
        typer.Option(
            help="A recorded healthy run (probe/diagnose) as baseline; a run without "
            "speculation is taken as --plain-baseline"
        ),
    ] = None,
    plain_baseline: Annotated[
        Path | None,
        typer.Option(
            help="A recorded run of the same server without speculation: each window's "
            "speedup over it"
        ),
    ] = None,
    alert_cmd: Annotated[
        str | None, typer.Option(help="Run this per alert (no shell; the alert JSON on stdin)")
    ] = None,
    alert_timeout: Annotated[float, typer.Option(help="Seconds an alert command may run")] = 10.0,
    prompt_tokens: Annotated[int, typer.Option(help="Canary prompt length (tokens)")] = 512,
    max_tokens: Annotated[int, typer.Option(help="Canary output length (tokens)")] = 256,
    workload: Annotated[
        str | None, typer.Option(help="Canary prompts: a workload name or file")
    ] = None,
    min_change: Annotated[float, typer.Option(help="Smallest change to alert on (ratio)")] = 1.10,
    false_alarms_per_day: Annotated[
        float, typer.Option(help="Design false-alarm rate per 24 h")
    ] = 0.1,
    out: Annotated[Path | None, typer.Option(help="Keep every window here (JSON lines)")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Event lines (JSON) on stdout")] = False,
    diagnose_on_alert: Annotated[
        bool,
        typer.Option("--diagnose-on-alert", help="Run `specscope diagnose --quick` on an alert"),
    ] = False,
    serve_metrics: Annotated[
        int | None, typer.Option(help="Serve the watch's estimates for Prometheus on this port")
    ] = None,
) -> None:
    try:
        base, plain = references(baseline, plain_baseline)
    except BaselineError as e:
        fail_usage(str(e))
    o = _options(
        url,
        {
            "metrics_url": metrics_url,
            "logs": logs,
            "logs_cmd": logs_cmd,
            "probe_every_s": probe_every,
            "interval_s": interval,
            "duration_s": duration,
            "warmup_s": warmup,
            "baseline_dir": baseline,
            "plain_baseline_dir": plain_baseline,
            "alert_cmd": alert_cmd,
            "alert_timeout_s": alert_timeout,
            "diagnose_on_alert": diagnose_on_alert,
            "prompt_tokens": prompt_tokens,
            "max_tokens": max_tokens,
            "workload": workload,
            "min_shift": min_change,
            "false_alarms_per_day": false_alarms_per_day,
            "out": out,
        },
    )
    if serve_metrics is not None and not 1 <= serve_metrics <= 65535:
        fail_usage(f"--serve-metrics must be a port within 1..65535, got {serve_metrics}")
    _run(o, (base, plain), json_, serve_metrics)


EXIT_TERMINATED = 143  # 128 + SIGTERM, after the summary


class Terminated(KeyboardInterrupt):
    """SIGTERM (a service manager's stop, a plain `kill`): ended like Ctrl-C, with the
    summary and the run dir closed, and told apart by its exit code."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


def _run(o: WatchOptions, refs: tuple[Any, Any], json_: bool, port: int | None) -> None:
    try:
        run_dir = WatchRunDir(o.out, _recorded(o)) if o.out is not None else None
    except OSError as e:
        fail_usage(f"--out {o.out}: cannot write ({e.strerror or e})")
    try:
        exporter = Exporter(port) if port is not None else None
    except OSError as e:
        fail_usage(f"--serve-metrics {port}: cannot listen ({e.strerror or e})")
    sink = _sink(json_, run_dir, exporter)
    w = Watch(o, sink, refs[0], plain=refs[1])
    code = EXIT_OK
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        summary = asyncio.run(w.run())
    except WatchStartError as e:
        say_error(e, e.exit_code)
        raise typer.Exit(e.exit_code) from None
    except KeyboardInterrupt as stop:
        code = EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED
        summary = w.summary(interrupted=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if run_dir is not None:
        summary = w.summary(summary.interrupted, str(o.out))
    sink(summary)
    if run_dir is not None:
        run_dir.close()
    if exporter is not None:
        exporter.close()
    raise typer.Exit(code)


def _recorded(o: WatchOptions) -> dict[str, Any]:
    """The options as watch.json keeps them (no credentials: the URL has none)."""
    return {
        "url": o.url,
        "metrics_url": o.metrics_url,
        "logs": str(o.logs) if o.logs else None,
        "logs_cmd": list(o.logs_cmd),
        "probe_every_s": o.probe_every_s,
        "interval_s": o.interval_s,
        "duration_s": o.duration_s,
        "warmup_s": o.warmup_s,
        "baseline": str(o.baseline_dir) if o.baseline_dir else None,
        "plain_baseline": str(o.plain_baseline_dir) if o.plain_baseline_dir else None,
        "alert_cmd": list(o.alert_cmd),
        "diagnose_on_alert": o.diagnose_on_alert,
        "prompt_tokens": o.prompt_tokens,
        "max_tokens": o.max_tokens,
        "workload": o.workload,
        "min_change": o.min_shift,
        "false_alarms_per_day": o.false_alarms_per_day,
    }
