"""Where the sync providers get their SQL: the backends' catalogues (`sql_lease.catalogue`).

The only module of `sql_lease.sync` that knows where the catalogues live. `Statements` is the
catalogue seen as SQL texts (what the sync executors send); the texts are the very ones the
async provider sends. No SQL text is written in `sql_lease.sync`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..catalogue import Catalogue

__all__ = ["Statements", "statements_of"]


@dataclass(frozen=True, slots=True)
class Statements:
    """The SQL texts of one `Catalogue` (see it for parameters and result columns)."""

    catalogue: Catalogue
    table: str
    channel: str
    acquire: str
    get_owner: str
    get_lease: str
    holder: str
    release: str
    renew: str
    transfer: str
    renew_many: Callable[[int], str]
    renew_many_args: Callable[[list[tuple[bytes, bytes]], int], tuple[object, ...]]
    force_release: str
    list_live: str
    purge_batch: str
    want: str
    now: str
    max_batch: int


def statements_of(c: Catalogue) -> Statements:
    """The SQL texts of ``c``."""
    return Statements(
        catalogue=c,
        table=c.table,
        channel=c.channel,
        acquire=c.acquire.sql,
        get_owner=c.get_owner.sql,
        get_lease=c.get_lease.sql,
        holder=c.holder.sql,
        release=c.release.sql,
        renew=c.renew.sql,
        transfer=c.transfer.sql,
        renew_many=lambda n: c.renew_many(n).sql,
        renew_many_args=c.renew_many_args,
        force_release=c.force_release.sql,
        list_live=c.list_live.sql,
        purge_batch=c.purge_batch.sql,
        want=c.want.sql,
        now=c.now.sql,
        max_batch=c.max_batch,
    )
