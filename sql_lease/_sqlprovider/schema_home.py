"""Where the lease table lives when a provider was given no ``schema``: found once, on first use.

An unqualified table name would be resolved by every statement through the session's
``search_path``, which a previous client of a pooled server connection may have changed
(``SET search_path``) and in which a temporary table ``leases`` comes first. So a provider
without ``schema`` runs the backend's `Backend.home_sql` once, before its first statement: the
first schema of the session's *default* search path that holds the table (temporary schemas
never count). From then on its catalogue names that schema. Until the table is found, every call
tries again (and fails with `LeaseSchemaError`), so migrating later works without a restart.

Statement texts taken from the catalogue before it was replaced are mapped to the new ones
(`renames`): a caller that picked its text just before still sends the qualified one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import fields
from typing import Any, Final

from ..catalogue import WRITE_KINDS, Catalogue, Statement
from ..errors import LeaseSchemaError

__all__ = ["home_of", "renames"]

_PLAIN: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def renames(old: Catalogue, new: Catalogue) -> dict[str, str]:
    """Every statement text of ``old`` mapped to the same statement of ``new``."""
    pairs = [
        (a.sql, getattr(new, f.name).sql)
        for f in fields(old)
        if isinstance(a := getattr(old, f.name), Statement)
    ]
    pairs.append((old.renew_many(1).sql, new.renew_many(1).sql))
    if old.batches is not None and new.batches is not None:
        count = len(WRITE_KINDS)
        for mask in range(1, 1 << count):
            kinds = tuple(k for k in range(count) if mask >> k & 1)
            pairs.append((old.batches.writes(kinds).sql, new.batches.writes(kinds).sql))
        pairs.append((old.batches.read.sql, new.batches.read.sql))
    was, now = old.counting, new.counting
    if was is not None and now is not None:  # texts of PostgreSQL's are the same for any n
        pairs += [
            (a.sql, getattr(now, f.name).sql)
            for f in fields(was)
            if isinstance(a := getattr(was, f.name), Statement)
        ]
        pairs += [(was.acquire_all(1).sql, now.acquire_all(1).sql)]
        pairs += [(was.release_all(1).sql, now.release_all(1).sql)]
        if was.ensure is not None and now.ensure is not None:
            pairs.append((was.ensure(1).sql, now.ensure(1).sql))
    return dict(pairs)


def home_of(rows: Sequence[Sequence[Any]], table_name: str, operation: str) -> str:
    """The schema `Backend.home_sql` found, or `LeaseSchemaError` when it found none (for
    the caller's ``operation``, whose first statement it precedes)."""
    if not rows:
        raise LeaseSchemaError(
            f"no table {table_name!r} in any schema of the database's default search_path"
            " (a temporary table does not count): run `sql-lease migrate`, or pass schema=",
            operation=operation,
        )
    home: str = rows[0][0]
    if not _PLAIN.fullmatch(home):
        raise LeaseSchemaError(
            f"table {table_name!r} was found in schema {home!r}, which is not a plain"
            " identifier: pass schema= explicitly",
            operation=operation,
        )
    return home
