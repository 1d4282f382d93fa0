"""Revision 0010 (Citus: the per-worker batch functions) on a plain PostgreSQL: nothing
changes, up or down."""

from __future__ import annotations

from collections.abc import Callable

from sql_lease import migrate

from .test_migration_0008 import _snapshot


def test_plain_postgres_is_unaffected_by_0010(make_database: Callable[[], str]) -> None:
    url = make_database()
    migrate.upgrade(url, "0009")
    functions, triggers, _ = _snapshot(url)
    migrate.upgrade(url, "0010")
    assert _snapshot(url) == (functions, triggers, "0010")
    assert not [f for f, _ in functions if "worker" in f]
    migrate.downgrade(url, "0009")
    assert _snapshot(url) == (functions, triggers, "0009")
