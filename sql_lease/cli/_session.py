"""Running a command's body against the chosen database, inside one event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .. import migrate
from .._sqlprovider.provider import SqlLeaseProvider
from ._options import Settings
from ._output import note

__all__ = ["announce", "with_provider"]

T = TypeVar("T")


def announce(settings: Settings) -> None:
    """Say on stderr which database is used when the user did not name one (not with
    ``--quiet`` or ``--json``: a script reading the JSON wants nothing else)."""
    if settings.target.note and not (settings.quiet or settings.as_json):
        note(settings.target.note)


def with_provider(settings: Settings, body: Callable[[SqlLeaseProvider], Awaitable[T]]) -> T:
    """Run ``body`` with a provider on the chosen database (migrating an embedded one first)."""
    announce(settings)

    async def main() -> T:
        seconds = settings.timeout_ms / 1000
        if settings.target.embedded:
            await migrate.upgrade_async(
                settings.target.url, table_name=settings.table, schema=settings.schema
            )
        provider = SqlLeaseProvider.from_url(
            settings.target.url,
            table_name=settings.table,
            schema=settings.schema,
            timeout=seconds,
            connect_timeout=seconds,
            pooler=settings.pooler,
        )
        try:
            return await body(provider)
        finally:
            await provider.aclose()

    return asyncio.run(main())
