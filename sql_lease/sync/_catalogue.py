"""Where the sync providers get their SQL: the backends' catalogues (`sql_lease.catalogue`).

The only module of `sql_lease.sync` that knows where the catalogues live. `Statements` is the
catalogue seen as SQL texts, derived from it (never a second list of its statements): the sync
provider runs the `Catalogue` itself, as the async one does, and shows this view as its
``statements``. No SQL text is written in `sql_lease.sync`.
"""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

from ..catalogue import Catalogue, Statement

__all__ = ["Statements", "statements_of"]


class Statements(SimpleNamespace):
    """The SQL texts of one `Catalogue`: ``catalogue``, ``table``, ``channel``,
    ``max_batch``, ``renew_many(n)`` (a text) and ``renew_many_args``, and for each statement of
    the catalogue its text under the same name (``acquire``, ``get_owner``, ``release``, ...)."""


def statements_of(c: Catalogue) -> Statements:
    """The SQL texts of ``c``."""
    texts = {
        field.name: statement.sql
        for field in fields(c)
        if isinstance(statement := getattr(c, field.name), Statement)
    }
    return Statements(
        catalogue=c,
        table=c.table,
        channel=c.channel,
        max_batch=c.max_batch,
        renew_many=lambda n: c.renew_many(n).sql,
        renew_many_args=c.renew_many_args,
        **texts,
    )
