"""The probe as an experiment `Target`: flavor detection, exact-length prompts drawn from a
workload, and the streaming client, over one HTTP session."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specscope.experiments.target import Prompt, Target
from specscope.probe.client import ProbeClient, Timeouts, new_session
from specscope.probe.connect import FlavorError, connect, detect_server
from specscope.probe.prompts import AsyncCounter, TokenizeError
from specscope.probe.workloads import PromptSource, Workload, resolve_workload
from specscope.trace import RequestSpec, RequestTrace


class TargetError(Exception):
    """The target cannot be measured at all (unreachable, unknown flavor, no tokenizer)."""


@dataclass(frozen=True)
class ProbeInputs:
    """The probe's input options as diagnose takes them (same flags as `probe`)."""

    timeouts: Timeouts = field(default_factory=Timeouts)
    api_key: str | None = field(default=None, repr=False)
    auth: aiohttp.BasicAuth | None = field(default=None, repr=False)
    model: str | None = None
    local_count: Callable[..., int] | None = None  # --tokenizer
    prompt_text: str | None = None  # --prompt-file (its length sets --prompt-tokens' default)
    workload: Workload | None = None  # --workload, or --prompt-file's one prompt
    unique: bool = True  # False: --same-prompt (no per-request reference)


def _close_enough(got: int, want: int) -> bool:
    """Within 1% (at least 2 tokens): a sweep point this close still measures that length."""
    return abs(got - want) <= max(2, want // 100)


class ExactPrompts:
    """Prompts of exactly n tokens by the server's tokenizer, drawn from the workload (its
    primary category unless a step names one) and unique per request unless `unique` is off.
    One that cannot be met exactly stops the run with the reason (a sweep point at the wrong
    context would mislead)."""

    def __init__(self, count: AsyncCounter, workload: Workload | None = None, unique: bool = True):
        self.count = count
        self.source = PromptSource(
            count, workload or resolve_workload(None), unique=unique, fit_files=True
        )

    async def prompt(self, n_tokens: int, seed: int = 0, category: str | None = None) -> Prompt:
        wl = self.source.workload
        built = await self.source.prompt(
            n_tokens, seed, category=None if wl.file_prompts else (category or wl.primary)
        )
        if (
            built.tokens is not None
            and not built.exact
            and not _close_enough(built.tokens, n_tokens)
        ):
            raise TargetError(
                f"could not build a prompt of {n_tokens} tokens (closest: {built.tokens})"
            )
        return Prompt(built.text, built.category)


class ProbeTarget(Target):
    """Adapts the probe's client and exact prompts to the experiments' Target protocol."""

    def __init__(self, client: ProbeClient, prompts: ExactPrompts, description: dict[str, Any]):
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


@contextlib.asynccontextmanager
async def open_target(
    url: str, flavor: str = "auto", api: str | None = None, inputs: ProbeInputs | None = None
) -> AsyncIterator[ProbeTarget]:
    """Detect the server's flavor and context, and yield a Target over one HTTP session.
    `inputs.workload` (default: the default workload; --prompt-file a one-prompt workload)
    supplies the prompts; `inputs.unique` False sends the same prompt content without a
    per-request reference. Raises TargetError when the server cannot be measured."""
    inputs = inputs or ProbeInputs()
    timeouts = inputs.timeouts
    async with new_session(timeouts, inputs.api_key, inputs.auth) as session:
        det = await detect_server(session, url, flavor, timeouts)
        if not det.reachable:
            raise TargetError(f"server not reachable: {det.error}")
        try:
            conn = await connect(
                session,
                url,
                det,
                api=api,
                model=inputs.model,
                timeouts=timeouts,
                local_count=inputs.local_count,
            )
        except (FlavorError, TokenizeError) as e:
            raise TargetError(str(e)) from None
        if conn.count is None:
            raise TargetError(
                f"{url} has no tokenize endpoint, so prompts of an exact token length "
                "cannot be built: pass --tokenizer PATH (the served model's "
                "tokenizer.json)"
            )
        prompts = ExactPrompts(conn.count, inputs.workload, inputs.unique)
        description = {
            "endpoint": url,
            "flavor": det.flavor,
            "api": conn.flavor.api,
            "model": conn.model,
            "server_info": det.server_info,
            "detection": det.evidence,
            "max_context": det.max_context,
            "workload": prompts.source.workload.describe(),
            "prompt_reference": prompts.source.nonce if inputs.unique else None,
        }
        yield ProbeTarget(conn.client(session, timeouts), prompts, description)
