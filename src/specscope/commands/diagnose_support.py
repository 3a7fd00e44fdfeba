"""The pieces `diagnose` wires together: the probe as an experiment Target, the embedded server,
and server evidence (log files, a log command, Prometheus before/after).

Kept out of diagnose.py so the command reads as the story (plan, measure, explain, report) and
each integration point with another layer is one small function here.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from specscope.experiments.target import Prompt, Target
from specscope.probe.client import Timeouts
from specscope.telemetry.records import SpecRecord
from specscope.trace import RequestSpec, RequestTrace, RunInfo

# Server logs are read for the run's wall-clock window widened by this much on each side
# (log timestamps have second resolution and clocks on one host agree to well under this).
LOG_WINDOW_SLACK_S = 2.0


class TargetError(Exception):
    """The target cannot be measured at all (unreachable, unknown flavor, no tokenizer)."""


class ServerStartError(Exception):
    """The embedded server did not come up."""


def split_command(cmd: str) -> list[str] | None:
    """argv for --logs-cmd (run without a shell); None when it does not parse."""
    try:
        argv = shlex.split(cmd)
    except ValueError:
        return None
    return argv or None


def rates_from(traces: list[RequestTrace]) -> tuple[float | None, float | None]:
    """(decode tok/s, prefill tok/s) from calibration requests, for the plan's estimate."""
    decode: list[float] = []
    prefill: list[float] = []
    for t in traces:
        if t.error is not None:
            continue
        win = t.decode_window()
        if win:
            decode.append(win[0] / win[1])
        if t.ttft_s and t.spec.prompt_tokens:
            prefill.append(t.spec.prompt_tokens / t.ttft_s)
    return (sum(decode) / len(decode) if decode else None,
            sum(prefill) / len(prefill) if prefill else None)


# -- the probe as a Target -----------------------------------------------------------------

@dataclass(frozen=True)
class ProbeInputs:
    """The probe's input options as diagnose takes them (same flags as `probe`)."""

    timeouts: Timeouts = field(default_factory=Timeouts)
    api_key: str | None = None
    auth: aiohttp.BasicAuth | None = field(default=None, repr=False)
    model: str | None = None
    local_count: Callable[..., int] | None = None  # --tokenizer
    prompt_text: str | None = None  # --prompt-file (its length sets --prompt-tokens' default)
    workload: Any = None  # a probe Workload (--workload, or --prompt-file's one prompt)
    unique: bool = True  # False: --same-prompt (no per-request reference)


class ProbeTarget(Target):
    """Adapts the probe (flavor detection, exact-length prompts, streaming client)."""

    def __init__(self, client: Any, prompts: Any, description: dict[str, Any]):
        self.client = client
        self.prompts = prompts
        self.description = description

    async def count_tokens(self, text: str) -> int:
        """`text`'s length in the tokenizer the prompts are built with."""
        return await self.prompts.count(text)

    @property
    def in_flight(self) -> dict[int, RequestTrace]:
        """The client's partial traces, so an interrupted request keeps what it received."""
        return self.client.in_flight

    async def prompt(self, n_tokens: int, seed: int = 0, category: str | None = None) -> Prompt:
        return await self.prompts.prompt(n_tokens, seed=seed, category=category)

    async def send(self, spec: RequestSpec, index: int = 0, slot: int = 0) -> RequestTrace:
        return await self.client.send(spec, index=index, slot=slot)

    def describe(self) -> dict[str, Any]:
        return dict(self.description)


def _close_enough(got: int, want: int) -> bool:
    """Within 1% (at least 2 tokens): a sweep point this close still measures that length."""
    return abs(got - want) <= max(2, want // 100)


class _ExactPrompts:
    """Prompts of exactly n tokens by the server's tokenizer, drawn from the workload (its
    primary category unless a step names one) and unique per request unless `unique` is off.
    One that cannot be met exactly stops the run with the reason (a sweep point at the wrong
    context would mislead)."""

    def __init__(self, count: Any, workload: Any = None, unique: bool = True):
        from specscope.probe.workloads import PromptSource, resolve_workload

        self.count = count
        self.source = PromptSource(count, workload or resolve_workload(None), unique=unique,
                                   fit_files=True)

    async def prompt(self, n_tokens: int, seed: int = 0, category: str | None = None) -> Prompt:
        wl = self.source.workload
        built = await self.source.prompt(
            n_tokens, seed, category=None if wl.file_prompts else (category or wl.primary))
        if built.tokens is not None and not built.exact and not _close_enough(built.tokens,
                                                                              n_tokens):
            raise TargetError(f"could not build a prompt of {n_tokens} tokens "
                              f"(closest: {built.tokens})")
        return Prompt(built.text, built.category)


@contextlib.asynccontextmanager
async def open_target(url: str, flavor: str = "auto", api: str | None = None,
                      inputs: ProbeInputs | None = None) -> AsyncIterator[Target]:
    """Detect the server's flavor and context, and yield a Target over one HTTP session.
    `inputs.workload` (a probe Workload; default: the default workload, --prompt-file a
    one-prompt workload) supplies the prompts; `inputs.unique` False sends the same prompt
    content without a per-request reference."""
    from specscope.probe import prompts as probe_prompts
    from specscope.probe.client import ProbeClient, new_session
    from specscope.probe.detect import detect
    from specscope.probe.flavors import make_flavor

    inputs = inputs or ProbeInputs()
    timeouts = inputs.timeouts
    async with new_session(timeouts, inputs.api_key, inputs.auth) as session:
        det = await detect(session, url, flavor=flavor,
                           timeout_s=min(timeouts.first_byte, timeouts.connect + 10.0))
        if not det.reachable:
            raise TargetError(f"server not reachable: {det.error}")
        model = inputs.model or det.model
        try:
            fl = make_flavor(det.flavor, api=api, model=model)
        except ValueError as e:
            raise TargetError(str(e)) from None
        description = {
            "endpoint": url, "flavor": det.flavor, "api": fl.api, "model": model,
            "server_info": det.server_info, "detection": det.evidence,
            "max_context": det.max_context,
        }
        try:
            found = await probe_prompts.server_counter(session, url, fl.tokenize_endpoints,
                                                       timeout_s=min(timeouts.first_byte, 30.0))
        except probe_prompts.TokenizeError as e:
            raise TargetError(str(e)) from None
        if found is not None:
            count = found[0]
        elif inputs.local_count is not None:
            count = probe_prompts.local_async(inputs.local_count)
        else:
            raise TargetError(f"{url} has no tokenize endpoint, so prompts of an exact token length "
                              "cannot be built: pass --tokenizer PATH (the served model's "
                              "tokenizer.json)")
        prompts = _ExactPrompts(count, inputs.workload, inputs.unique)
        description["workload"] = prompts.source.workload.describe()
        description["prompt_reference"] = prompts.source.nonce if inputs.unique else None
        counter = (probe_prompts.delta_counter(inputs.local_count)
                   if inputs.local_count is not None else None)
        client = ProbeClient(url, fl, timeouts=timeouts, counter=counter, session=session)
        yield ProbeTarget(client, prompts, description)


# -- the embedded server -------------------------------------------------------------------

DEFAULT_SCENARIO = "seed-regression"
# Speculation settings asked of the engine for the embedded default (n-gram drafts, DDTree verify);
# the engine is used only when the backend it builds really speculates.
ENGINE_SPEC_OPTIONS: dict[str, Any] = {"drafter": "ngram", "verify": "tree", "num_draft_tokens": 4}


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _engine_backend() -> tuple[Any, str]:
    """The engine, speculating: the n-gram tree is faster than plain decoding on this project's
    2-core CPU machines as on a GPU (bench/embedded_default.py measures it against plain, served
    and probed as a user would), so it is the default on both."""
    from specscope.engine.factory import build_backend

    device = "cuda" if _cuda_available() else "cpu"
    backend = build_backend(device=device, **ENGINE_SPEC_OPTIONS)
    info = backend.info
    if not info.num_draft_tokens:
        raise ServerStartError("the engine built without speculation")
    return backend, (f"engine {info.model} on {device} ({info.spec_algorithm}, "
                     f"{info.num_draft_tokens} draft tokens)")


@contextlib.contextmanager
def embedded_server(scenario: str | None = None, time_scale: float | None = None,
                    backend: str | None = None, log_file: Path | None = None
                    ) -> Iterator[tuple[str, str, list[str]]]:
    """Start the default server on 127.0.0.1 in a thread; yield (base URL, description, notes).

    Default: the engine with a speculative configuration (n-gram drafter, tree verify) when it
    builds (torch installed) and really speculates; else the twin with the seed-regression
    scenario, saying why.
    Its log goes to `log_file` (read as evidence).
    """
    from specscope.serve.options import ServeOptions
    from specscope.serve.runner import run_server
    from specscope.twin.server import start_twin_server

    notes: list[str] = []
    handle = None
    description = ""
    try:
        if backend == "engine" or (backend is None and scenario is None):
            try:
                be, description = _engine_backend()
                handle = run_server(be, ServeOptions(log_file=log_file, log_to_stderr=False))
            except Exception as e:
                if backend == "engine":
                    raise ServerStartError(f"engine: {e.__class__.__name__}: {e}") from None
                notes.append(f"embedded engine not used ({e.__class__.__name__}: {e}); "
                             f"diagnosing the twin ({DEFAULT_SCENARIO}) instead")
        if handle is None:
            name = scenario or DEFAULT_SCENARIO
            handle = start_twin_server(name, time_scale=time_scale, log_file=log_file)
            scale = f", time scale {time_scale:g}" if time_scale else ""
            description = f"twin scenario {name}{scale}"
    except ServerStartError:
        raise
    except Exception as e:
        raise ServerStartError(f"{e.__class__.__name__}: {e}") from None
    try:
        yield handle.url, description, notes
    finally:
        handle.stop()


# -- server evidence -----------------------------------------------------------------------

async def scrape_metrics(url: str | None) -> Any:
    """A Prometheus scrape before the run (None without --metrics-url or when it fails)."""
    if not url:
        return None
    from specscope.telemetry.prometheus import MetricsError, scrape_metrics

    try:
        return await asyncio.to_thread(scrape_metrics, url)
    except MetricsError as e:  # reported in the notes after the run; a run is not stopped for it
        return e


def collect_telemetry(args: dict[str, Any], info: RunInfo,
                      metrics_before: Any) -> tuple[list[SpecRecord], list[str]]:
    """Server evidence for the run window: log files, a log command, a Prometheus delta.
    Failures become notes in the report, never a crash (the measurement is already saved)."""
    from specscope.telemetry.coverage import covered_share, wait_for_closing_interval
    from specscope.telemetry.ingest import LogQuery, read_logs
    from specscope.telemetry.sources import SourceError

    records: list[SpecRecord] = []
    notes: list[str] = []
    run_end = time.time()
    since = info.started_unix - LOG_WINDOW_SLACK_S
    until = run_end + LOG_WINDOW_SLACK_S
    if args.get("logs") or args.get("logs_cmd_text"):
        query = LogQuery(paths=list(args.get("logs") or []), logs_cmd=args.get("logs_cmd_text"),
                         command_timeout_s=float(args.get("logs_timeout") or 30.0),
                         since=since, until=until, keep_records=True)
        what = ", ".join([*query.paths, *([query.logs_cmd] if query.logs_cmd else [])])
        try:
            res = read_logs(query)
            # Interval formats log the run's last interval after it ends: wait for it (bounded).
            waited = wait_for_closing_interval(query.paths, res.records, run_end)
            if waited > 0:
                query.until = time.time() + LOG_WINDOW_SLACK_S
                res = read_logs(query)
            records += res.records
            s = res.summary
            coverage = covered_share(res.records, info.started_unix, run_end)
            info.telemetry = {"log_coverage": coverage, "log_wait_s": round(waited, 2),
                              "log_records": len(res.records)}
            notes.append(f"server logs ({what}): {len(res.records)} speculation records in the run "
                         f"window; {s.malformed} malformed line(s)"
                         + (f"; waited {waited:.1f} s for the closing interval" if waited else "")
                         + ("" if coverage is None
                            else f"; interval records cover {coverage:.0%} of the run window"))
            notes += [f"server logs: {w}" for w in s.warnings[:5]]
        except (SourceError, OSError, ValueError) as e:
            notes.append(f"server logs ({what}) not read: {e}")
    url = args.get("metrics_url")
    if url:
        from specscope.telemetry.prometheus import MetricsError, metrics_delta, scrape_metrics

        if metrics_before is None or isinstance(metrics_before, Exception):
            notes.append(f"metrics {url}: no scrape before the run ({metrics_before}); no delta")
        else:
            try:
                recs = metrics_delta(metrics_before, scrape_metrics(url))
                records += recs
                notes.append(f"metrics {url}: {len(recs)} run-scoped delta record(s) "
                             "(server-wide counters: other traffic is included)")
            except MetricsError as e:
                notes.append(f"metrics {url}: scrape after the run failed ({e})")
    return records, notes


