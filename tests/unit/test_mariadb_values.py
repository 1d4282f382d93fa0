"""MariaDB's values on the client, no database: the drivers' arguments of every statement
(`placeholders.bound`: each marker's argument, in marker order) and rows' times made aware."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sql_lease.backends import backend_named
from sql_lease.backends.mariadb.driver import aware_rows
from sql_lease.backends.mariadb.placeholders import bound, compiled
from sql_lease.catalogue import Statement


def _texts() -> list[str]:
    c = backend_named("mariadb").catalogue("leases", None)
    found = [getattr(c, name) for name in dir(c) if not name.startswith("_")]
    if c.counting is not None:
        counting = c.counting
        found += [getattr(counting, name) for name in dir(counting) if not name.startswith("_")]
    texts = [s.sql for s in found if isinstance(s, Statement)]
    texts += [c.renew_many(1).sql, c.renew_many(3).sql]
    return [*texts, "SELECT 1", "SELECT ?1", "SELECT ?2", "SELECT ?2, ?1, ?2", "SELECT '%', ?1"]


@pytest.mark.parametrize("sql", _texts())
def test_bound_arguments_are_the_markers_arguments_in_order(sql: str) -> None:
    text, bind = bound(sql)
    expected_text, order = compiled(sql)
    assert text == expected_text
    args = tuple(f"arg{i}".encode() for i in range(max(order, default=-1) + 2))
    got = bind(args)
    assert type(got) is tuple and got == tuple(args[i] for i in order)
    assert bound(sql)[1] is bind  # made once


def test_rows_come_back_with_aware_utc_times_and_other_values_as_they_were() -> None:
    # As the driver reads a DATETIME(6): naive (UTC, the session's time zone).
    naive = datetime(2026, 3, 29, 1, 30, 5, 123456, tzinfo=UTC).replace(tzinfo=None)
    first = datetime(1, 1, 1, tzinfo=UTC).replace(tzinfo=None)
    last = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC).replace(tzinfo=None)
    rows = ((1, 7, naive, b"owner"), (None, first, b"", last), ())
    got = aware_rows(rows)
    assert got == [
        (1, 7, naive.replace(tzinfo=UTC), b"owner"),
        (None, first.replace(tzinfo=UTC), b"", last.replace(tzinfo=UTC)),
        (),
    ]
    assert type(got) is list and all(type(row) is tuple for row in got)
    assert got[0][2].tzinfo is UTC and got[1][3].tzinfo is UTC
    assert aware_rows(()) == []
