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
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from specscope.experiments.target import Prompt, Target
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

class ProbeTarget(Target):
    """Adapts the probe (flavor detection, exact-length prompts, streaming client)."""

    def __init__(self, client: Any, prompts: Any, description: dict[str, Any]):
        self.client = client
        self.prompts = prompts
        self.description = description

    async def prompt(self, n_tokens: int, seed: int = 0, category: str | None = None) -> Prompt:
        return await self.prompts.prompt(n_tokens, seed=seed, category=category)

    async def send(self, spec: RequestSpec) -> RequestTrace:
        return await self.client.send(spec)

    def describe(self) -> dict[str, Any]:
        return dict(self.description)


def max_context_from(server_info: dict[str, Any], models: Any = None) -> int | None:
    """The server's context length where it says it: SGLang /get_server_info `context_length`,
    vLLM /v1/models `max_model_len`, llama.cpp /props `n_ctx`. None when unknown."""
    cands: list[Any] = [server_info.get("context_length"), server_info.get("max_context"),
                        server_info.get("max_model_len")]
    dgs = server_info.get("default_generation_settings")
    if isinstance(dgs, dict):
        cands.append(dgs.get("n_ctx"))
    cands.append(server_info.get("n_ctx"))
    if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
        m = models["data"][0]
        if isinstance(m, dict):
            cands += [m.get("max_model_len"), m.get("context_length")]
    for c in cands:
        if isinstance(c, int) and not isinstance(c, bool) and c > 0:
            return c
    return None


class _ExactPrompts:
    """Prompts of exactly n tokens by the server's tokenizer, drawn from the workload (its
    primary category unless a step names one) and unique per request unless `unique` is off.
    One that cannot be met exactly stops the run with the reason (a sweep point at the wrong
    context would mislead)."""

    def __init__(self, count: Any, workload: Any = None, unique: bool = True):
        from specscope.probe.workloads import PromptSource, resolve_workload

        self.source = PromptSource(count, workload or resolve_workload(None), unique=unique,
                                   fit_files=True)

    async def prompt(self, n_tokens: int, seed: int = 0, category: str | None = None) -> Prompt:
        wl = self.source.workload
        built = await self.source.prompt(
            n_tokens, seed, category=None if wl.file_prompts else (category or wl.primary))
        if (built.tokens is not None and not built.exact
                and abs(built.tokens - n_tokens) > max(2, n_tokens // 100)):
            raise TargetError(f"could not build a prompt of {n_tokens} tokens "
                              f"(closest: {built.tokens})")
        return Prompt(built.text, built.category)


@contextlib.asynccontextmanager
async def open_target(url: str, flavor: str = "auto", api: str | None = None,
                      api_key: str | None = None, workload: Any = None,
                      unique: bool = True) -> AsyncIterator[Target]:
    """Detect the server's flavor and context, and yield a Target over one HTTP session.
    `workload` (a probe Workload; default: the default workload) supplies the prompts;
    `unique` False sends the same prompt content without a per-request reference."""
    from specscope.probe import prompts as probe_prompts
    from specscope.probe.client import ProbeClient, Timeouts, new_session
    from specscope.probe.detect import _get_json, detect
    from specscope.probe.flavors import make_flavor

    timeouts = Timeouts()
    async with new_session(timeouts, api_key) as session:
        det = await detect(session, url, flavor=flavor)
        if not det.reachable:
            raise TargetError(f"server not reachable: {det.error}")
        try:
            fl = make_flavor(det.flavor, api=api, model=det.model)
        except ValueError as e:
            raise TargetError(str(e)) from None
        _, models, _ = await _get_json(session, url.rstrip("/") + "/v1/models", 10.0)
        description = {
            "endpoint": url, "flavor": det.flavor, "api": fl.api, "model": det.model,
            "server_info": det.server_info, "detection": det.evidence,
            "max_context": max_context_from(det.server_info, models),
        }
        found = await probe_prompts.server_counter(session, url, fl.tokenize_endpoints)
        if found is None:
            raise TargetError(f"{url} has no tokenize endpoint, so prompts of an exact token length "
                              "cannot be built (use `specscope probe --tokenizer` for such servers)")
        client = ProbeClient(url, fl, timeouts=timeouts, session=session)
        prompts = _ExactPrompts(found[0], workload, unique)
        description["workload"] = prompts.source.workload.describe()
        description["prompt_reference"] = prompts.source.nonce if unique else None
        yield ProbeTarget(client, prompts, description)


# -- the embedded server -------------------------------------------------------------------

DEFAULT_SCENARIO = "seed-regression"
# Speculation settings asked of the engine for the embedded default (ENGINE2's options);
# the engine is used only when the backend it builds really speculates.
ENGINE_SPEC_OPTIONS: dict[str, Any] = {"drafter": "ngram", "verify": "tree", "num_draft_tokens": 4}


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _engine_backend() -> tuple[Any, str]:
    """The engine, speculating. On this project's 2-core CPU machines the n-gram tree measured
    41 tok/s against 12.6 without speculation on the probe's prompts (3.3x; see issue 8's note),
    so it is the default on CPU as well as on a GPU."""
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
    from specscope.serve.runner import run_server, start_twin_server

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
    from specscope.telemetry.ingest import LogQuery, read_logs
    from specscope.telemetry.sources import SourceError

    records: list[SpecRecord] = []
    notes: list[str] = []
    since = info.started_unix - LOG_WINDOW_SLACK_S
    until = time.time() + LOG_WINDOW_SLACK_S
    if args.get("logs") or args.get("logs_cmd_text"):
        query = LogQuery(paths=list(args.get("logs") or []), logs_cmd=args.get("logs_cmd_text"),
                         command_timeout_s=float(args.get("logs_timeout") or 30.0),
                         since=since, until=until, keep_records=True)
        what = ", ".join([*query.paths, *([query.logs_cmd] if query.logs_cmd else [])])
        try:
            res = read_logs(query)
            records += res.records
            s = res.summary
            notes.append(f"server logs ({what}): {len(res.records)} speculation records in the run "
                         f"window; {s.malformed} malformed line(s)")
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


