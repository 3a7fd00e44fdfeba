"""From a URL to a ready client: detect the server, pick its flavor, find a token counter.

`probe` and `diagnose` both start this way, the preflight first (probe.preflight); they differ
only in what they do with a server that does not answer (probe records a failed request,
diagnose stops), so detection and the rest are two steps. Bounded in time: every look-up has
its own timeout, derived from the user's `Timeouts`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from specscope.probe.client import ProbeClient, Timeouts
from specscope.probe.detect import Detection, detect
from specscope.probe.flavors import Flavor, make_flavor
from specscope.probe.preflight import preflight
from specscope.probe.prompts import AsyncCounter, delta_counter, local_async, server_counter

# A tokenize look-up waits at most this long (also bounded by the first-byte timeout).
TOKENIZE_TIMEOUT_S = 30.0


class FlavorError(ValueError):
    """The detected (or asked-for) flavor cannot serve the asked-for API, or is unknown."""


def detection_timeout_s(timeouts: Timeouts) -> float:
    """How long detection may wait for each info endpoint."""
    return min(timeouts.first_byte, timeouts.connect + 10.0)


async def detect_server(
    session: aiohttp.ClientSession, url: str, flavor: str, timeouts: Timeouts
) -> Detection:
    """Which server answers at `url` (`flavor` other than "auto" skips the guess).

    The preflight comes first: it raises `preflight.NotOpenAIServer` for a server that answers
    but is not an OpenAI-compatible one; one that does not answer is `reachable` False."""
    timeout_s = detection_timeout_s(timeouts)
    checked = await preflight(session, url, timeout_s=timeout_s)
    if not checked.reachable:
        return Detection(
            flavor=flavor if flavor != "auto" else "openai", reachable=False, error=checked.error
        )
    return await detect(session, url, flavor=flavor, timeout_s=timeout_s)


@dataclass(frozen=True)
class Connection:
    """A reachable server, its flavor and how prompt tokens are counted.

    `count` is None when the server has no tokenize endpoint and no --tokenizer was given
    (prompts of an exact length cannot be built then; file prompts still can be sent)."""

    url: str
    flavor: Flavor
    model: str | None
    count: AsyncCounter | None
    count_source: str  # "POST /tokenize", "local --tokenizer", or "" without a counter
    local_count: Callable[..., int] | None = None

    def client(self, session: aiohttp.ClientSession, timeouts: Timeouts) -> ProbeClient:
        """A streaming client over `session`; with a local tokenizer it also counts streamed
        delta text (servers that send no per-chunk token counts)."""
        counter = delta_counter(self.local_count) if self.local_count is not None else None
        return ProbeClient(
            self.url, self.flavor, timeouts=timeouts, counter=counter, session=session
        )


async def connect(
    session: aiohttp.ClientSession,
    url: str,
    detection: Detection,
    *,
    api: str | None,
    model: str | None,
    timeouts: Timeouts,
    local_count: Callable[..., int] | None,
) -> Connection:
    """The flavor for a reachable server and its token counter: the server's tokenize
    endpoint when it has one, else the local tokenizer, else none.

    Raises FlavorError when the flavor/api pair cannot be built, TokenizeError when the
    server's tokenize endpoint answers implausibly."""
    served = model or detection.model
    try:
        flavor = make_flavor(detection.flavor, api=api, model=served)
    except ValueError as e:
        raise FlavorError(str(e)) from None
    found = await server_counter(
        session,
        url,
        flavor.tokenize_endpoints,
        timeout_s=min(timeouts.first_byte, TOKENIZE_TIMEOUT_S),
    )
    if found is not None:
        count, how = found
    elif local_count is not None:
        count, how = local_async(local_count), "local --tokenizer"
    else:
        count, how = None, ""
    return Connection(
        url=url, flavor=flavor, model=served, count=count, count_source=how, local_count=local_count
    )
