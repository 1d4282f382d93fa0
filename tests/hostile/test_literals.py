"""Pooler mode's client-side literals mean the same under every session setting.

Each value is rendered by `psycopg_values.literal` once, then read back by the server under
each setting that changes how a string literal is read (``standard_conforming_strings``,
``backslash_quote``, the client encodings whose multibyte characters end in a backslash byte)
and compared with the value sent as hex: the server must see the very bytes.
"""

from __future__ import annotations

import psycopg
import pytest

from sql_lease.backends.postgres.psycopg_values import IsoTimestamptzLoader, literal

from ._settings import ENCODINGS, server_dsn

VALUES: list[bytes] = [
    bytes(range(256)),
    b"\\",
    b"'",
    b"\\'",
    b"''\\\\x41",
    b"\\x706c61696e",
    b"\x83\\'",  # SJIS lead byte, backslash, quote
    "ソ表\\'".encode(),
    b"\x00",
]
SESSIONS = [
    ("SET standard_conforming_strings = on",),
    ("SET standard_conforming_strings = off", "SET backslash_quote = on"),
    *[
        (f"SET client_encoding = '{e}'", "SET backslash_quote = on", *scs)
        for e in ENCODINGS
        for scs in [("SET standard_conforming_strings = off",), ()]
    ],
]


def _refuse(value: object) -> bytes:
    raise AssertionError(f"no fallback expected for {value!r}")


@pytest.mark.parametrize("session", SESSIONS, ids=lambda s: "; ".join(s))
def test_literals_are_read_back_as_the_same_bytes(
    session: tuple[str, ...], pg_server: object
) -> None:
    url = pg_server.render_as_string(hide_password=False)  # type: ignore[attr-defined]
    with psycopg.connect(server_dsn(url), autocommit=True) as conn:
        for statement in session:
            conn.execute(statement)
        pg = conn.pgconn
        for value in VALUES:
            one = literal(value, _refuse)
            many = literal([value, b"x", value], _refuse)
            assert one.isascii() and many.isascii()
            query = (
                b"SELECT "
                + one
                + b" = pg_catalog.decode('"
                + value.hex().encode()
                + b"', 'hex'), "
                + many
                + b" = ARRAY[pg_catalog.decode('"
                + value.hex().encode()
                + b"', 'hex'), 'x'::bytea, pg_catalog.decode('"
                + value.hex().encode()
                + b"', 'hex')]"
            )
            result = pg.exec_(query)
            assert result.status == psycopg.pq.ExecStatus.TUPLES_OK, result.error_message
            assert (result.get_value(0, 0), result.get_value(0, 1)) == (b"t", b"t"), value
        for number in (0, 1, -5, 2**62):
            result = pg.exec_(b"SELECT (" + literal(number, _refuse) + b")::text")
            assert result.get_value(0, 0) == str(number).encode()
        result = pg.exec_(b"SELECT " + literal([1, 2**40], _refuse) + b"::text")
        assert result.get_value(0, 0) == b"{1,1099511627776}"


@pytest.mark.parametrize("text", [b"infinity", b"-infinity", b"0001-01-01 00:00:00+00 BC"])
def test_a_timestamp_python_cannot_hold_is_a_database_error_not_a_crash(text: bytes) -> None:
    with pytest.raises(psycopg.DataError):
        IsoTimestamptzLoader(1184).load(text)
