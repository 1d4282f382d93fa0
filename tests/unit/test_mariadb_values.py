"""MariaDB's values on the client, no database: rows' times made aware."""

from __future__ import annotations

from datetime import UTC, datetime

from sql_lease.backends.mariadb.driver import aware_rows


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
