"""The streaming client: send one request, stamp every raw read, decode afterwards.

Timing rule (ARCHITECTURE §10): `time.perf_counter_ns()` is taken right after each socket read
returns and before any parsing; every event decoded from that read gets that stamp. Events that
arrived in the same read therefore share a timestamp, which is the truth about when the client
could see them.

Failure rule: `send` never raises (except cancellation). Every failure becomes an `ErrorInfo`
on the returned trace, and whatever was received before the failure is kept.

Error kinds: `connection` (refused, reset, closed before responding), `http_status` (4xx/5xx,
with a body excerpt), `timeout_connect`, `timeout_first_byte`, `timeout_between_chunks`,
`timeout_total`, `empty_body`, `malformed_sse` (not an event stream), `malformed_json` (an
event's data is not JSON), `server_error` (an error object inside the stream),
`stream_truncated` (ended before a finish), `missing_done` (finished but no end marker),
`line_too_long` (an event-stream line past the parser's bound), `impossible_count` (a token
count that cannot be: negative, going backwards, more than the request allows; the raw value is
in the message), `client_error` (anything else, with its class name).

Text from the server is scrubbed (`trace.text.scrub`) as it lands on the trace, so a lone
surrogate in a JSON string cannot make the record unwritable.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

import aiohttp

from specscope.probe.flavors.base import Decoder, Flavor, StreamError, TokenCounter
from specscope.probe.sse import LineTooLong, SSEParser
from specscope.trace.model import CANCELLED, Chunk, ErrorInfo, RequestSpec, RequestTrace
from specscope.trace.text import scrub, scrub_tree

API_KEY_ENV = "SPECSCOPE_API_KEY"
_BODY_EXCERPT = 300
# Tokens a request may receive beyond its max_tokens before a count is called impossible (a
# speculative step that overshoots the cap by a few drafts is real; millions are not).
MAX_TOKENS_OVERSHOOT = 64


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `first_byte` runs from send to the first body byte (connect included);
    `between_chunks` from one read to the next; `total` bounds the whole request."""

    connect: float = 10.0
    first_byte: float = 120.0
    between_chunks: float = 60.0
    total: float = 900.0


def resolve_api_key(flag_value: str | None) -> str | None:
    """--api-key wins, else $SPECSCOPE_API_KEY. The key is only ever put in a request header."""
    return flag_value or os.environ.get(API_KEY_ENV) or None


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def new_session(
    timeouts: Timeouts, api_key: str | None = None, auth: aiohttp.BasicAuth | None = None
) -> aiohttp.ClientSession:
    """A session whose only own timeout is the TCP connect; the rest is enforced per phase.

    One fresh connection per request (`force_close=True`): llama.cpp's server closes the
    connection after every streamed response without saying so, and a pooled connection that
    the server has already dropped fails the *next* request ("server closed the connection
    before responding"). A fresh connection also makes timing uniform: every request's TTFT
    includes the same TCP connect (a fraction of a millisecond on loopback), instead of only
    the first one's. aiohttp does not retry POSTs on a stale connection by itself, and a retry
    here would risk sending a generation twice, so we do not pool at all.

    `auth`: the credentials of a URL's userinfo (`probe.endpoint`); a bearer key wins over them.
    """
    return aiohttp.ClientSession(
        auth=None if api_key else auth,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect),
        connector=aiohttp.TCPConnector(limit=0, force_close=True),
        headers=auth_headers(api_key),
    )


@dataclass
class _Seen:
    """What an attempt has received so far (tells a first-byte timeout from a mid-stream one)."""

    bytes: int = 0


class _Retry(Exception):
    """The server rejected this rung of the flavor's request ladder with HTTP 400."""


def _excerpt(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").strip().replace("\n", " ")
    return text[:_BODY_EXCERPT] + ("…" if len(text) > _BODY_EXCERPT else "")


class ProbeClient:
    """Streams requests of one flavor to one server. Use `async with` (or pass a session)."""

    def __init__(
        self,
        base_url: str,
        flavor: Flavor,
        *,
        timeouts: Timeouts | None = None,
        api_key: str | None = None,
        counter: TokenCounter | None = None,
        session: aiohttp.ClientSession | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.flavor = flavor
        self.timeouts = timeouts or Timeouts()
        self.counter = counter
        self._api_key = api_key
        self._session = session
        self._own_session = session is None
        #: Traces of requests in flight, by index: on Ctrl-C the workload records them as
        #: cancelled (with what they received so far) instead of losing them.
        self.in_flight: dict[int, RequestTrace] = {}

    async def __aenter__(self) -> ProbeClient:
        if self._session is None:
            self._session = new_session(self.timeouts, self._api_key)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, spec: RequestSpec, index: int = 0, slot: int = 0) -> RequestTrace:
        """Run one streamed request to completion or failure; never raises (but cancellation)."""
        trace = RequestTrace(
            index=index, spec=spec, t_send_ns=time.perf_counter_ns(), concurrency_slot=slot
        )
        self.in_flight[index] = trace
        await self._send(trace)  # on cancellation the trace stays in `in_flight` for the caller
        self.in_flight.pop(index, None)
        return trace

    async def _send(self, trace: RequestTrace) -> None:
        variant = self.flavor.variant
        while True:
            try:
                await self._attempt(trace, variant)
                self.flavor.variant = variant
                break
            except _Retry:
                variant += 1
                trace.chunks = []
                continue
            except asyncio.CancelledError:
                trace.error = trace.error or ErrorInfo(kind=CANCELLED, message="request cancelled")
                trace.t_end_ns = time.perf_counter_ns()
                raise
            except Exception as e:  # the last line of "never raises": record, do not crash
                trace.error = ErrorInfo(kind="client_error", message=f"{type(e).__name__}: {e}")
                break
        if trace.t_end_ns is None:
            trace.t_end_ns = time.perf_counter_ns()
        if trace.error is not None:
            trace.error.message = scrub(trace.error.message)

    # -- one attempt -----------------------------------------------------------------------

    async def _attempt(self, trace: RequestTrace, variant: int) -> None:
        assert self._session is not None, "use `async with ProbeClient(...)`"
        req = self.flavor.build_request(trace.spec, variant)
        decoder = self.flavor.decoder(trace.spec, self.counter)
        url = self.base_url + req.path
        to = self.timeouts
        loop = asyncio.get_running_loop()
        trace.t_send_ns = time.perf_counter_ns()
        start = loop.time()
        total_deadline = start + to.total
        seen = _Seen()
        chunks: list[Chunk] = trace.chunks
        try:
            async with asyncio.timeout_at(min(total_deadline, start + to.first_byte)) as tm:
                async with self._session.post(
                    url, json=req.body, headers={"Accept": "text/event-stream"}
                ) as resp:
                    if resp.status >= 400:
                        raw = await resp.content.read(64 * 1024)
                        if resp.status == 400 and variant + 1 < self.flavor.n_variants:
                            raise _Retry()
                        trace.error = ErrorInfo(
                            kind="http_status",
                            http_status=resp.status,
                            message=f"HTTP {resp.status} from {req.path}: {_excerpt(raw) or '(empty body)'}",
                        )
                        return
                    await self._read_stream(resp, trace, decoder, chunks, tm, total_deadline, seen)
        except TimeoutError:
            now = loop.time()
            if now >= total_deadline - 1e-3:
                kind, limit = "timeout_total", to.total
            elif seen.bytes == 0:
                kind, limit = "timeout_first_byte", to.first_byte
            else:
                kind, limit = "timeout_between_chunks", to.between_chunks
            trace.error = ErrorInfo(
                kind=kind,
                message=f"{kind.replace('_', ' ')} after {limit:g} s "
                f"({len(chunks)} events received)",
            )
        except aiohttp.ServerTimeoutError as e:
            trace.error = ErrorInfo(
                kind="timeout_connect", message=f"connect timed out after {to.connect:g} s: {e}"
            )
        except aiohttp.ClientConnectorError as e:
            trace.error = ErrorInfo(
                kind="connection",
                message=f"cannot connect to {self.base_url}: "
                f"{e.os_error.strerror if e.os_error else e}",
            )
        except aiohttp.ServerDisconnectedError:
            trace.error = ErrorInfo(
                kind="connection" if seen.bytes == 0 else "stream_truncated",
                message="server closed the connection "
                + ("before responding" if not chunks else f"mid-stream after {len(chunks)} events"),
            )
        except aiohttp.ClientPayloadError as e:
            trace.error = ErrorInfo(
                kind="stream_truncated", message=f"stream cut after {len(chunks)} events: {e}"
            )
        except aiohttp.ClientError as e:
            trace.error = ErrorInfo(kind="connection", message=f"{type(e).__name__}: {e}")
        finally:
            if trace.t_end_ns is None or trace.error is not None:
                trace.t_end_ns = time.perf_counter_ns()

    async def _read_stream(
        self,
        resp: aiohttp.ClientResponse,
        trace: RequestTrace,
        decoder: Decoder,
        chunks: list[Chunk],
        tm: asyncio.Timeout,
        total_deadline: float,
        seen: _Seen,
    ) -> None:
        loop = asyncio.get_running_loop()
        between = self.timeouts.between_chunks
        content = resp.content
        parser = SSEParser()
        head = bytearray()
        n_events = 0
        perf = time.perf_counter_ns
        limit = trace.spec.max_tokens + MAX_TOKENS_OVERSHOOT
        try:
            while True:
                data = await content.readany()
                t_ns = perf()  # stamp first: nothing between the read and the clock
                if not data:
                    break
                tm.reschedule(min(total_deadline, loop.time() + between))
                seen.bytes += len(data)
                if len(head) < _BODY_EXCERPT:
                    head += data[: _BODY_EXCERPT - len(head)]
                for ev in parser.feed(data):
                    n_events += 1
                    _apply(decoder, ev.data, t_ns, chunks, limit)
            t_end = perf()
            for ev in parser.close():
                n_events += 1
                _apply(decoder, ev.data, t_end, chunks, limit)
            trace.t_end_ns = t_end
        except StreamError as e:
            trace.error = ErrorInfo(kind=e.kind, message=e.message)
            trace.t_end_ns = perf()
        except LineTooLong as e:
            trace.error = ErrorInfo(kind="line_too_long", message=f"{e} after {n_events} events")
            trace.t_end_ns = perf()
        finally:
            _fill(trace, decoder)
        if trace.error is None:
            trace.error = _impossible_totals(trace, limit)
        if trace.error is not None:
            return
        ctype = resp.headers.get("Content-Type", "?")
        if seen.bytes == 0:
            trace.error = ErrorInfo(
                kind="empty_body", message=f"HTTP {resp.status} with an empty body"
            )
        elif n_events == 0:
            trace.error = ErrorInfo(
                kind="malformed_sse",
                message=f"response is not an event stream "
                f"(content-type {ctype}): {_excerpt(bytes(head))}",
            )
        elif not decoder.done:
            marker = self.flavor.needs_done_marker
            if decoder.finish_reason is not None:
                trace.error = ErrorInfo(
                    kind="missing_done",
                    message=f"stream finished ({decoder.finish_reason}) but ended without {marker}",
                )
            else:
                trace.error = ErrorInfo(
                    kind="stream_truncated",
                    message=f"stream ended without a "
                    f"finish or {marker} after {trace.tokens_received} tokens",
                )


def _apply(decoder: Decoder, data: str, t_ns: int, chunks: list[Chunk], limit: int) -> None:
    delta = decoder.on_event(data)
    if delta is not None:
        if delta.n_tokens > limit:
            raise StreamError(
                "impossible_count",
                f"one event reported {delta.n_tokens} tokens; the request allows at most {limit}",
            )
        # model_construct: no validation on the receive path (the fields are ours, typed).
        chunks.append(
            Chunk.model_construct(
                t_ns=t_ns,
                n_tokens=delta.n_tokens,
                n_chars=len(delta.text),
                server_ts=delta.server_ts,
            )
        )


def _fill(trace: RequestTrace, decoder: Decoder) -> None:
    """Copy what the decoder learned onto the trace (also for a failed request: keep it all)."""
    trace.token_count_source = decoder.token_count_source
    trace.completion_tokens = (
        decoder.completion_tokens
        if decoder.completion_tokens is not None
        else trace.tokens_received
    )
    trace.prompt_tokens_reported = decoder.prompt_tokens
    trace.finish_reason = None if decoder.finish_reason is None else scrub(decoder.finish_reason)
    trace.request_id = None if decoder.request_id is None else scrub(decoder.request_id)
    trace.server_spec = decoder.server_spec
    if trace.server_spec is not None and trace.server_spec.raw:
        trace.server_spec.raw = scrub_tree(trace.server_spec.raw)
    trace.text = scrub("".join(decoder.text_parts))
    trace.cached_tokens = decoder.cached_tokens
    trace.delta_fields = dict(decoder.field_tokens) or None


def _impossible_totals(trace: RequestTrace, limit: int) -> ErrorInfo | None:
    """Request-level counts that cannot be true (the raw values stay on the trace)."""
    for name, value in (
        ("completion_tokens", trace.completion_tokens),
        ("prompt_tokens", trace.prompt_tokens_reported),
    ):
        if value is not None and value < 0:
            return ErrorInfo(
                kind="impossible_count", message=f"server reported {name} = {value} (negative)"
            )
    if trace.completion_tokens is not None and trace.completion_tokens > limit:
        return ErrorInfo(
            kind="impossible_count",
            message=(
                f"server reported completion_tokens = {trace.completion_tokens}; the request allows "
                f"at most {limit} (max_tokens {trace.spec.max_tokens})"
            ),
        )
    if trace.tokens_received > limit:
        return ErrorInfo(
            kind="impossible_count",
            message=(
                f"the stream's counts add up to {trace.tokens_received} tokens; the request allows "
                f"at most {limit} (max_tokens {trace.spec.max_tokens})"
            ),
        )
    return None
