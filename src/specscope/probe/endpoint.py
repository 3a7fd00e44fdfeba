"""A server's base URL as given by the user, split into what may be shown and what may not.

`http://user:SECRET@host:8000/` is a fine thing to type, but the credential must never reach a
run directory, a report or the terminal: the URL we keep is `http://host:8000`, and the
credential travels only as an HTTP Basic `Authorization` header (what aiohttp would have sent
for a URL with userinfo anyway).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp


class EndpointError(ValueError):
    """Not a usable http(s) base URL; the message names the input (credentials removed)."""


@dataclass(frozen=True)
class Endpoint:
    url: str  # scheme://host[:port][/path], no userinfo, no trailing slash or `/v1`
    auth: aiohttp.BasicAuth | None = field(default=None, repr=False)  # never printed


def redact_url(text: str) -> str:
    """`text` with any URL userinfo removed (unchanged when it has none or does not parse)."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return text.split("@", 1)[-1] if "@" in text else text
    if "@" not in parts.netloc:
        return text
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def strip_api_suffix(url: str) -> str:
    """`url` without trailing slashes and a trailing `/v1` (the usual OpenAI base URL), so
    `http://h:p`, `http://h:p/` and `http://h:p/v1/` all name the same server."""
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")].rstrip("/")
    return url


def parse_endpoint(text: str) -> Endpoint:
    """The base URL of a server: http(s), a host, a valid port; userinfo split off; a trailing
    `/v1` dropped (`strip_api_suffix`: paths such as `/v1/models` are added to it)."""
    shown = redact_url(text)
    try:
        parts = urlsplit(text.strip())
        host = parts.hostname
        _ = parts.port  # raises ValueError for a port that is not a number in range
    except ValueError as e:
        raise EndpointError(f"not a valid URL ({e}): {shown!r}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise EndpointError(f"URL must look like http://HOST:PORT, got {shown!r}")
    if any(c.isspace() for c in parts.netloc):
        raise EndpointError(f"URL has a space in its host: {shown!r}")
    auth = None
    if parts.username is not None or parts.password is not None:
        auth = aiohttp.BasicAuth(unquote(parts.username or ""), unquote(parts.password or ""))
    netloc = parts.netloc.rsplit("@", 1)[-1]
    url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    return Endpoint(url=strip_api_suffix(url), auth=auth)
