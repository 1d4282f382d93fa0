"""What ``from_url`` builds a provider from, and how a pooled connection becomes its fetch.

Plain types of the backend seam (`sql_lease.backends` re-exports them): `PlanOptions` (what
``from_url`` was asked for), `Plan` (what a backend's `AsyncExecution.plan` decided, in one
call), `planned_arguments` (a plan's connect arguments, filled by the backend), and the
adaptor types (`Fetch`, `Adaptor`, `CatalogueNow`). No driver, no backend package.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection

from ..catalogue import Catalogue

__all__ = ["Adaptor", "CatalogueNow", "Fetch", "Plan", "PlanOptions", "planned_arguments"]


#: ``await fetch(sql, *args)`` -> the rows: the driver's own call, bound to one connection.
Fetch = Callable[..., Awaitable[list[Any]]]
#: The provider's catalogue as it is now (it changes once, when the table's schema is found).
CatalogueNow = Callable[[], Catalogue]
#: Turns a pooled connection into its `Fetch` (once, when the connection is checked out), for
#: the statements of the provider's catalogue (`CatalogueNow`: a fetch may read its data, as
#: PostgreSQL's pooler mode reads `Catalogue.server_calls`; most ignore it).
Adaptor = Callable[[PoolProxiedConnection, CatalogueNow], Fetch]


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """What ``from_url`` was asked for, already checked: what a backend plans an engine from.
    The caller's ``connect_args`` and ``engine_kwargs`` win over the backend's defaults."""

    timeout: float
    connect_timeout: float
    synchronous_commit: bool
    pooler: str | None
    connect_args: Mapping[str, Any]
    engine_kwargs: Mapping[str, Any]
    listen_url: URL | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """How ``from_url`` builds and runs a provider on one URL, decided by one call of
    `AsyncExecution.plan`: the engine (URL, connect arguments, options), the adaptor of its
    connections, the one-off checks on it (``watch``), the LISTEN engine's arguments (with
    ``listen_url``), the wake-up policy (``listens``: False, waiters poll) and how many read
    and write batches (multi-row statements of coalesced calls) may be in flight at once
    (``read_batches``, ``write_batches``: 1 straight to a server, where one batch at a time
    carries the most calls; more behind a transaction pooler, whose extra hop would
    otherwise bound a kind to one round trip at a time while the pooler's other server
    connections sit idle)."""

    engine_url: URL
    connect_args: dict[str, Any]
    engine_kwargs: dict[str, Any]
    adaptor: Adaptor
    watch: Callable[[AsyncEngine], None]
    pooler: str | None
    listens: bool
    listen_url: URL | None = None
    listen_connect_args: dict[str, Any] | None = None
    read_batches: int = 1
    write_batches: int = 1


def planned_arguments(
    options: PlanOptions, fill: Callable[..., None]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """A `Plan`'s connect arguments and engine options, and the LISTEN engine's connect
    arguments (with ``listen_url``, always with durable commits): copies of the caller's, filled
    by the backend's ``fill(connect_args, engine_kwargs, *, timeout, connect_timeout,
    synchronous_commit)``."""
    o = options
    connect_args, engine_kwargs = dict(o.connect_args), dict(o.engine_kwargs)
    fill(
        connect_args,
        engine_kwargs,
        timeout=o.timeout,
        connect_timeout=o.connect_timeout,
        synchronous_commit=o.synchronous_commit,
    )
    listen_args = None
    if o.listen_url is not None:
        listen_args = dict(o.connect_args)
        fill(
            listen_args,
            {},
            timeout=o.timeout,
            connect_timeout=o.connect_timeout,
            synchronous_commit=True,
        )
    return connect_args, engine_kwargs, listen_args
