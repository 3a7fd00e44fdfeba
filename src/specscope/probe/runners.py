"""Which runner sends a measurement's requests: this process' loop, or `--workers N` (probe.fleet).

`probe` and `diagnose` both choose here, from the same two flags, so both measure the same way:
`--workers 1` without `--ray-address` is the probe's client on this process' loop (what every
run did before workers existed); otherwise a fleet of local processes, or of Ray actors.
"""

from __future__ import annotations

from collections.abc import Callable

import aiohttp

from specscope.probe.client import ProbeClient, Timeouts
from specscope.probe.fleet import Fleet, InProcess
from specscope.probe.ray_workers import INSTALL_HINT, RayFleet, ray_installed
from specscope.probe.worker import MAX_WORKERS, WorkerSetup
from specscope.probe.workers import LocalFleet


def workers_problem(
    workers: int, ray_address: str | None, concurrency: int | None = None
) -> str | None:
    """Why --workers (1..MAX_WORKERS, at most the concurrency where one is fixed) or
    --ray-address (a name, and Ray installed) is refused, or None."""
    if not 1 <= workers <= MAX_WORKERS:
        return f"--workers must be within 1..{MAX_WORKERS}, got {workers}"
    if concurrency is not None and workers > concurrency:
        return (
            f"--workers {workers} exceeds --concurrency {concurrency}: "
            "each worker keeps at least one request in flight"
        )
    if ray_address is not None:
        if not ray_address.strip():
            return "--ray-address must name a Ray cluster (ADDR, auto or local)"
        if not ray_installed():
            return f"--ray-address needs Ray, which is not installed: {INSTALL_HINT}"
    return None


def make_runner(
    client: ProbeClient,
    workers: int,
    ray_address: str | None,
    *,
    timeouts: Timeouts,
    api_key: str | None = None,
    auth: aiohttp.BasicAuth | None = None,
    local_count: Callable[..., int] | None = None,
) -> InProcess | Fleet:
    """This process' loop (--workers 1), else a fleet whose workers each build a client like
    `client` (its server, its flavor) with the same credentials and timeouts."""
    if workers == 1 and ray_address is None:
        return InProcess(client)
    setup = WorkerSetup(
        url=client.base_url,
        flavor=client.flavor,
        timeouts=timeouts,
        api_key=api_key,
        auth=auth,
        local_count=local_count,
    )
    if ray_address is not None:
        return RayFleet(workers, setup, ray_address)
    return LocalFleet(workers, setup)
