"""Keeping an application's own Alembic autogenerate away from the library's tables.

An application's ``env.py`` compares its ``target_metadata`` with the database; the leases
tables are not in that metadata, so autogenerate would offer to drop them. Plug this in:

    from sql_lease import migrate
    context.configure(..., include_name=migrate.include_name)
    # or, composed with a filter of your own and a custom table or schema:
    context.configure(..., include_name=migrate.exclude_leases(my_filter, table_name="coord"))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._core.validate import check_identifier
from ..backends import BACKEND_PACKAGES, backend_named
from ..schema import DEFAULT_TABLE, version_table_name
from .event_names import event_names

__all__ = ["IncludeName", "exclude_leases", "include_name", "lease_table_names"]

#: Alembic's ``include_name(name, type_, parent_names) -> bool`` hook.
IncludeName = Callable[[str | None, str, Mapping[str, Any]], bool]


def lease_table_names(table_name: str = DEFAULT_TABLE) -> frozenset[str]:
    """Every table the library's migrations create for ``table_name``.

    The leases table, its version table, each backend's extra tables (SQLite's fence counter,
    see `Backend.extra_tables`), and the event tables of revision 0003.
    """
    check_identifier("table_name", table_name)
    own = {table_name, version_table_name(table_name)}
    for package in BACKEND_PACKAGES:
        own |= backend_named(package).extra_tables(table_name)
    return frozenset(own | event_names(table_name).tables)


def exclude_leases(
    include_name: IncludeName | None = None,
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
) -> IncludeName:
    """An ``include_name`` hook that leaves out the library's tables, then asks yours.

    The tables of ``table_name`` in ``schema`` (None: the default schema) are never included;
    every other name is passed to ``include_name`` when given, else included. Use it when
    your ``target_metadata`` does not contain the leases table (`lease_table`).
    """
    ours = lease_table_names(table_name)
    if schema is not None:
        check_identifier("schema", schema)

    def include(name: str | None, type_: str, parent_names: Mapping[str, Any]) -> bool:
        if type_ == "table" and name in ours and parent_names.get("schema_name") == schema:
            return False
        return True if include_name is None else include_name(name, type_, parent_names)

    return include


#: The hook for the default table (``leases``) in the default schema.
include_name: IncludeName = exclude_leases()
