"""The active canary: one streamed request at a time, real-content prompts of an exact length
(probe's PromptSource over the built-in workloads, each prompt unique so that no prefix cache
answers it), long enough to reach the output positions where position effects show."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp

from specscope.probe.client import ProbeClient
from specscope.probe.connect import Connection, FlavorError, connect, detect_server
from specscope.probe.prompts import PromptError
from specscope.probe.workloads import PromptSource, resolve_workload
from specscope.probe.workloads.files import WorkloadError
from specscope.telemetry.server_info import max_commit_len_from
from specscope.trace.model import ErrorInfo, RequestSpec, RequestTrace
from specscope.watch.options import WatchOptions


class WatchStartError(Exception):
    """The watch cannot start: `exit_code` 2 for bad input (not an OpenAI-compatible server, a
    flavor it cannot serve), 1 for a server that does not answer."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Canary:
    """A connected canary: its client, prompt source and what the server said at start."""

    client: ProbeClient
    source: PromptSource
    conn: Connection
    server_info: dict[str, Any]
    max_commit_len: int | None
    o: WatchOptions
    sent: int = 0

    async def send(self) -> RequestTrace:
        """One canary request; never raises for the server's faults (they are the trace's
        error, as the probe records them)."""
        index = self.sent
        self.sent += 1
        try:
            built = await self.source.prompt(self.o.prompt_tokens, index)
        except PromptError as e:
            spec = RequestSpec(prompt="", max_tokens=self.o.max_tokens, tag="watch:canary")
            trace = RequestTrace(index=index, spec=spec, t_send_ns=0)
            trace.error = ErrorInfo(kind="prompt", message=f"canary prompt not built: {e}")
            return trace
        flavor = self.conn.flavor
        spec = RequestSpec(
            prompt=built.messages
            if built.messages is not None and flavor.api == "chat"
            else built.text,
            prompt_tokens=built.tokens,
            max_tokens=self.o.max_tokens,
            temperature=0.0,
            ignore_eos=True,
            api=flavor.api,  # type: ignore[arg-type]
            tag="watch:canary",
            category=built.category,
        )
        return await self.client.send(spec, index=index)


async def start_canary(session: aiohttp.ClientSession, o: WatchOptions) -> Canary:
    """Detect and connect (probe.connect, preflight first), then the prompt source. Raises
    WatchStartError with one line."""
    from specscope.probe.preflight import NotOpenAIServer

    try:
        det = await detect_server(session, o.url, "auto", o.timeouts)
    except NotOpenAIServer as e:
        raise WatchStartError(str(e), 2) from None
    if not det.reachable:
        raise WatchStartError(f"server not reachable: {o.url} ({det.error})", 1)
    try:
        conn = await connect(
            session, o.url, det, api=None, model=None, timeouts=o.timeouts, local_count=None
        )
    except FlavorError as e:
        raise WatchStartError(str(e), 2) from None
    try:
        workload = resolve_workload(o.workload)
    except WorkloadError as e:
        raise WatchStartError(str(e), 2) from None
    if conn.count is None and not workload.file_prompts:
        raise WatchStartError(
            f"{o.url} has no tokenize endpoint: the canary cannot build prompts of an exact "
            "length (pass --workload FILE with prompts as given)",
            2,
        )
    return Canary(
        client=conn.client(session, o.timeouts),
        source=PromptSource(conn.count, workload, unique=True),
        conn=conn,
        server_info=det.server_info,
        max_commit_len=max_commit_len_from(det.server_info),
        o=o,
    )
