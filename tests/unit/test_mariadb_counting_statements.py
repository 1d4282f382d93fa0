"""MariaDB's counting statements as plain data, checked without a database: parameters,
columns (as SQLite's), the session variables they rely on, and the all-or-none decoder."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from sql_lease.backends import backend_named
from sql_lease.backends.mariadb.counting import COUNTING_VARIABLES, decode_all
from sql_lease.backends.mariadb.sessions import session_sql
from sql_lease.catalogue import AllRow, CountingStatements, Statement

T1 = datetime(2026, 1, 1, 0, 0, 15, tzinfo=UTC)


def _counting(package: str) -> CountingStatements:
    counting = backend_named(package).catalogue("leases", None).counting
    assert counting is not None
    return counting


def _statements(c: CountingStatements, n: int = 3) -> list[Statement[object]]:
    found: list[Statement[object]] = [c.acquire, c.holders, c.release, c.renew, c.transfer]
    found += [c.acquire_all(n), c.release_all(n)]
    if c.ensure is not None:
        found.append(c.ensure(n))
    return found


def _assigned(sql: str) -> list[str]:
    """The expression of each ``(@var := ...)`` of ``sql`` (parentheses matched)."""
    found = []
    for match in re.finditer(r"\(@sql_lease_\w+ := ", sql):
        depth, i = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(sql[i], 0)
            i += 1
        found.append(sql[match.end() : i - 1])
    return found


def test_every_counting_statement_binds_exactly_its_named_parameters() -> None:
    for statement in _statements(_counting("mariadb")):
        numbers = {int(x) for x in re.findall(r"\?(\d+)", statement.sql)}
        assert numbers == set(range(1, len(statement.params) + 1)), statement.name


def test_the_statements_answer_with_sqlites_columns() -> None:
    maria, lite = _counting("mariadb"), _counting("sqlite")
    for m, s in zip(_statements(maria)[:7], _statements(lite)[:7], strict=True):
        assert (m.name, m.params, m.columns) == (s.name, s.params, s.columns)
    assert maria.keys_args([b"a", b"b"]) == (b"a", b"b")


def test_every_variable_is_assigned_from_the_row_or_clock_and_set_by_the_session() -> None:
    """MariaDB folds a constant condition away when it prepares a statement (its assignments
    with it), and reads an unset variable as NULL in RETURNING: every assignment depends on
    the row, the clock or a sequence, and every variable is set, typed, by the session."""
    assert _assigned("(@sql_lease_x := f(a)) IS NULL") == ["f(a)"]
    settings = session_sql(10.0)
    for name, value in COUNTING_VARIABLES:
        assert f"{name} = {value}" in settings
    known = {name for name, _ in COUNTING_VARIABLES} | {"@sql_lease_now"}
    for statement in _statements(_counting("mariadb")):
        used = set(re.findall(r"@sql_lease_\w+", statement.sql))
        assert used <= known, (statement.name, used - known)
        for value in _assigned(statement.sql):
            assert re.search(r"SYSDATE|NEXTVAL|VALUES\(|@sql_lease_|\w\.\w", value), value


def test_all_or_none_rows_decode_to_booleans() -> None:
    assert decode_all((b"k", 1, 7, T1, None)) == AllRow(b"k", True, 7, T1, None)
    assert decode_all((b"k", 0, None, None, b"x")) == AllRow(b"k", False, None, None, b"x")
    assert decode_all((b"k", None, None, None, None)).acquired is None


def test_all_or_none_locks_its_rows_in_key_order() -> None:
    counting = _counting("mariadb")
    for statement in (counting.acquire_all(4), counting.release_all(4)):
        assert "ORDER BY s.`key` FOR UPDATE" in statement.sql, statement.name
    assert counting.ensure is not None
    assert counting.acquire_all(4) is counting.acquire_all(4)  # built once per size
