"""`specscope serve`: the twin or the engine behind an OpenAI-compatible server on loopback.

The engine flags live here too (passed to `specscope.engine.factory.build_served_backend`, which
builds the engine in a process of its own: serve/engine_process.py), so that the engine needs no
edit of this file.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Any

import typer

from specscope.commands.common import err_console, fail_usage
from specscope.engine.faults import ENGINE_FAULT_HELP, parse_engine_faults
from specscope.report.notices import render_listening
from specscope.serve.faults import HOST_FAULTS, FaultError, HostFaults, parse_host_faults

DEFAULT_SCENARIO = "seed-regression"
FAULTS_HELP = (
    "A known fault to check a diagnosis against (repeatable; docs/faults.md): "
    + "; ".join(f"{name}: {what}" for name, what in {**HOST_FAULTS, **ENGINE_FAULT_HELP}.items())
)


def _faults(specs: list[str], backend: str) -> tuple[HostFaults, tuple[str, ...]]:
    """(serve's faults, the engine's fault names) from `--fault NAME[=VALUE]` flags."""
    try:
        host, rest = parse_host_faults(specs)
    except FaultError as exc:
        fail_usage(str(exc))
    unknown = [r for r in rest if r.partition("=")[0] not in ENGINE_FAULT_HELP]
    if unknown:
        known = ", ".join([*HOST_FAULTS, *ENGINE_FAULT_HELP])
        fail_usage(f"--fault {unknown[0]}: no such fault (known: {known})")
    if rest and backend != "engine":
        fail_usage(f"--fault {rest[0]} is a fault of the engine: use --backend engine")
    try:  # a bad value is one line here, before a model is loaded
        parse_engine_faults(rest)
    except ValueError as exc:
        fail_usage(str(exc))
    return host, tuple(rest)


def _twin_backend(
    scenario: str,
    variant: str | None,
    time_scale: float | None,
    truth_file: Path | None,
    seed: int | None,
    switch: tuple[str | None, float] = (None, 0.0),
) -> Any:
    from specscope.twin.backend import TwinBackend
    from specscope.twin.scenario import ScenarioError, load_scenario
    from specscope.twin.switch import SwitchingTwinBackend

    try:
        sc = load_scenario(scenario, variant)
        then = load_scenario(switch[0]) if switch[0] is not None else None
    except ScenarioError as exc:
        fail_usage(str(exc))
    if switch[1] < 0:
        fail_usage(f"--switch-after must be >= 0 seconds, got {switch[1]}")
    if time_scale is not None:
        if time_scale <= 0:
            fail_usage(f"--time-scale must be > 0, got {time_scale}")
        sc = sc.scaled(time_scale)
    if seed is not None:
        sc = sc.model_copy(update={"seed": seed})
    if truth_file is not None and not truth_file.parent.is_dir():
        fail_usage(f"--truth-file {truth_file}: directory {truth_file.parent} does not exist")
    if then is not None:
        return SwitchingTwinBackend(sc, then, switch[1], truth_file)
    return TwinBackend(sc, truth_file)


def _engine_backend(options: dict[str, Any]) -> Any:
    """The engine in a process of its own (serve/engine_process.py), built there by
    `build_served_backend(**options)`; this process keeps HTTP and the text."""
    try:
        from specscope.engine.factory import build_served_backend
    except ImportError as exc:
        fail_usage(
            f"--backend engine is not available here ({exc}); install the engine extra "
            "(pip install -e '.[engine]') or use --backend twin"
        )
    from specscope.serve.engine_process import EngineProcess, EngineStartError

    try:
        return EngineProcess(functools.partial(build_served_backend, **options))
    except EngineStartError as exc:  # any engine set-up failure is one line, not a traceback
        fail_usage(f"--backend engine: cannot start ({exc})")


def serve(
    backend: Annotated[str, typer.Option(help="twin | engine")] = "twin",
    scenario: Annotated[
        str,
        typer.Option(
            help="Twin scenario: a TOML file or a shipped name (healthy, seed-regression, "
            "draft-window, coalescing, speculation-overhead; NAME:baseline for the variant)"
        ),
    ] = DEFAULT_SCENARIO,
    variant: Annotated[str | None, typer.Option(help="Scenario variant (baseline)")] = None,
    host: Annotated[str, typer.Option(help="Bind address (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free)")] = 30000,
    log_file: Annotated[Path | None, typer.Option(help="Also write the server log here")] = None,
    stream_interval: Annotated[
        int | None,
        typer.Option(
            help="Emit a chunk when completion_tokens % N == 0 (SGLang); default: scenario or 1"
        ),
    ] = None,
    per_token_events: Annotated[
        bool | None,
        typer.Option(
            "--per-token-events/--no-per-token-events",
            help="One SSE event per token (llama.cpp-like); default: scenario or off",
        ),
    ] = None,
    decode_log_interval: Annotated[int, typer.Option(help="Decode batch log every N steps")] = 40,
    time_scale: Annotated[float | None, typer.Option(help="Twin: multiply all times")] = None,
    truth_file: Annotated[Path | None, typer.Option(help="Twin: append ground truth JSONL")] = None,
    served_model_name: Annotated[str | None, typer.Option(help="Model id to report")] = None,
    # Engine options (forwarded to specscope.engine.factory.build_served_backend).
    model: Annotated[str, typer.Option(help="Engine: model name or path")] = "smollm2",
    page_size: Annotated[int | None, typer.Option(help="Engine: KV page size (tokens)")] = None,
    kv_alloc: Annotated[str | None, typer.Option(help="Engine: contiguous | scattered")] = None,
    max_batch: Annotated[int | None, typer.Option(help="Max running requests")] = None,
    device: Annotated[str | None, typer.Option(help="Engine: cpu | cuda")] = None,
    drafter: Annotated[
        str | None,
        typer.Option(
            help="Engine: none | ngram | model:PATH | layers:N | dflash:PATH (dflash:smollm2: the shipped one)"
        ),
    ] = None,
    verify: Annotated[str | None, typer.Option(help="Engine: chain | tree")] = None,
    num_draft_tokens: Annotated[int | None, typer.Option(help="Engine: drafts per step")] = None,
    budget: Annotated[int | None, typer.Option(help="Engine: tree node budget")] = None,
    draft_window: Annotated[int | None, typer.Option(help="Engine: drafter context window")] = None,
    tree_kv: Annotated[str | None, typer.Option(help="Engine: compact | inplace")] = None,
    overlap: Annotated[
        bool | None,
        typer.Option(
            "--overlap/--no-overlap",
            help="Engine: overlap each plain decode step with the host's work on the step "
            "before (default: on with --device cuda)",
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed (twin: overrides scenario)")] = None,
    fault: Annotated[list[str] | None, typer.Option(help=FAULTS_HELP)] = None,
    switch_to: Annotated[
        str | None,
        typer.Option(help="Twin: change to this scenario after --switch-after seconds (watch)"),
    ] = None,
    switch_after: Annotated[
        float, typer.Option(help="Twin: wall seconds after start of the --switch-to change")
    ] = 90.0,
) -> None:
    from specscope.serve.options import ServeOptions
    from specscope.serve.runner import serve_forever

    if stream_interval is not None and stream_interval < 1:
        fail_usage(f"--stream-interval must be >= 1, got {stream_interval}")
    if decode_log_interval < 1:
        fail_usage(f"--decode-log-interval must be >= 1, got {decode_log_interval}")
    if not 0 <= port <= 65535:
        fail_usage(f"--port must be within 0..65535, got {port}")
    if log_file is not None and not log_file.parent.is_dir():
        fail_usage(f"--log-file {log_file}: directory {log_file.parent} does not exist")
    host_faults, engine_faults = _faults(fault or [], backend)
    if switch_to is not None and backend != "twin":
        fail_usage("--switch-to changes the twin's scenario: use --backend twin")
    if backend == "twin":
        be = _twin_backend(
            scenario, variant, time_scale, truth_file, seed, (switch_to, switch_after)
        )
    elif backend == "engine":
        given = {
            "model": model,
            "page_size": page_size,
            "kv_alloc": kv_alloc,
            "max_batch": max_batch,
            "device": device,
            "drafter": drafter,
            "verify": verify,
            "num_draft_tokens": num_draft_tokens,
            "budget": budget,
            "draft_window": draft_window,
            "tree_kv": tree_kv,
            "overlap": overlap,
            "seed": seed,
            "faults": engine_faults or None,
        }
        # Only the flags given: the engine owns its defaults.
        be = _engine_backend({k: v for k, v in given.items() if v is not None})
    else:
        fail_usage(f"--backend must be twin or engine, got {backend!r}")
    options = ServeOptions(
        stream_interval=stream_interval,
        per_token_events=per_token_events,
        decode_log_interval=decode_log_interval,
        log_file=log_file,
        max_batch=max_batch,
        served_model_name=served_model_name,
        faults=host_faults,
    )

    try:
        serve_forever(
            be, options, host, port, lambda url: render_listening(backend, url, err_console)
        )
    except OSError as exc:
        fail_usage(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    finally:
        if backend == "engine":  # its process never outlives the server (the lifespan's end
            be.stop()  # stopped it already unless the server never started: idempotent)
