"""One simple-protocol query on a psycopg connection's libpq handle, without a cursor.

`psycopg_driver`'s hot path: psycopg's cursor (its generators, a future and a reader
registration per wait, result bookkeeping, a task per call to survive cancellation) costs more
client CPU than the statement costs the server. Here a call is: the query text joined from
cached byte chunks and literals that no session setting changes (`psycopg_values`),
``PQsendQuery``, one wait for the socket, the results read until libpq has none left (the
connection is idle again, whatever happened), rows loaded by psycopg's `Transformer` with the
pinned adapters (`psycopg_values.PinnedContext`: text timestamps read in ISO form).
A failed statement raises the exception psycopg's cursor would
(`psycopg.errors.error_from_result`); a lost connection, psycopg's `OperationalError`.

Nothing else uses the connection meanwhile: the provider holds it for the call. A call
cancelled while its statement runs returns at once (`Exchange.run` re-raises at once); the
statement is then cancelled on the server and its results drained in a task of its own
(`Exchange.abandon`, bounded by ``grace``), which `psycopg_driver.settle` awaits before the
connection is dropped.

`Blocking` is the same for a sync connection (the sync provider's pooler mode): the query
goes through libpq's ``PQexec``, which waits with the GIL released and returns the last
statement's result, or the first failed one's (PQexec stops there).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any, Final

import psycopg
from psycopg import pq
from psycopg.adapt import Transformer
from psycopg.errors import error_from_result

from .psycopg_values import PinnedContext
from .psycopg_values import literal as setting_proof

__all__ = ["Blocking", "Exchange", "Template", "render", "template"]

#: A statement as byte chunks around its placeholders, and which argument each one takes.
Template = tuple[bytes, tuple[bytes, ...], tuple[int, ...]]

_PLACEHOLDER: Final = re.compile(r"\$(\d+)")  # the catalogue's: never inside a literal
_TUPLES_OK: Final = int(pq.ExecStatus.TUPLES_OK)
_FATAL_ERROR: Final = int(pq.ExecStatus.FATAL_ERROR)
_BAD: Final = int(pq.ConnStatus.BAD)


def template(sql: str, prefix: str, encoding: str) -> Template:
    """``prefix + sql`` split at its ``$n`` placeholders, encoded once."""
    parts = _PLACEHOLDER.split(prefix + sql)
    order = tuple(int(n) - 1 for n in parts[1::2])
    return parts[0].encode(encoding), tuple(p.encode(encoding) for p in parts[2::2]), order


def render(found: Template, args: tuple[object, ...], literal: Callable[[Any], bytes]) -> bytes:
    """``found``'s chunks joined with ``args`` as SQL literals that no session setting
    changes (`psycopg_values.literal`; ``literal``, a psycopg `Transformer`'s ``as_literal``,
    only for a type the statements never bind)."""
    head, chunks, order = found
    parts = [head]
    for index, chunk in zip(order, chunks, strict=True):
        parts.append(setting_proof(args[index], literal))
        parts.append(chunk)
    return b"".join(parts)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Exchange:
    """A psycopg connection's libpq handle, used one query at a time (module docstring)."""

    __slots__ = ("_conn", "_literal", "_pgconn", "_tx", "encoding")

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn
        self._pgconn = conn.pgconn
        self._tx = Transformer(PinnedContext(conn))
        self._literal = self._tx.as_literal
        self.encoding: Final = conn.info.encoding

    def query(self, found: Template, args: tuple[object, ...]) -> bytes:
        """The query text: ``found``'s chunks with the arguments as SQL literals."""
        return render(found, args, self._literal)

    async def run(self, query: bytes) -> list[Any]:
        """Send ``query`` and return the rows of its last statement (none if it has none)."""
        pgconn = self._pgconn
        pgconn.send_query(query)
        if pgconn.flush():
            await self._flushed()
        last = failed = None
        while True:
            if pgconn.is_busy():
                await self._readable()
            result = pgconn.get_result()
            if result is None:
                break
            if result.status == _FATAL_ERROR:
                failed = result
            last = result
        if failed is not None:
            raise error_from_result(failed, encoding=self.encoding)
        if last is None or last.status != _TUPLES_OK:
            return []
        tx = self._tx
        tx.set_pgresult(last)
        return tx.load_rows(0, last.ntuples, tuple)

    async def abandon(self, grace: float) -> None:
        """After a cancelled `run`: have the server cancel the statement, then read what is
        left until the connection is idle (at most ``grace`` seconds)."""
        pgconn = self._pgconn
        async with asyncio.timeout(grace):
            if pgconn.flush():
                await self._flushed()
            await self._conn.cancel_safe(timeout=grace)
            while True:
                if pgconn.is_busy():
                    await self._readable()
                if pgconn.get_result() is None:
                    return

    async def _readable(self) -> None:
        """Wait until libpq has a whole result (reading what the socket has meanwhile)."""
        pgconn, loop = self._pgconn, asyncio.get_running_loop()
        fd = pgconn.socket  # read here: it raises on a lost connection
        future = loop.create_future()
        loop.add_reader(fd, _wake, future)
        try:
            while True:
                await future
                pgconn.consume_input()
                if not pgconn.is_busy():
                    return
                future = loop.create_future()
                loop.add_reader(fd, _wake, future)
        finally:
            loop.remove_reader(fd)

    async def _flushed(self) -> None:
        """Wait until libpq has sent all of the query (a long one: a big batch)."""
        pgconn, loop = self._pgconn, asyncio.get_running_loop()
        fd = pgconn.socket  # read here: it raises on a lost connection
        try:
            while True:
                future = loop.create_future()
                loop.add_writer(fd, _wake, future)
                await future
                if not pgconn.flush():
                    return
        finally:
            loop.remove_writer(fd)


class Blocking:
    """A sync psycopg connection's libpq handle, one query at a time (module docstring)."""

    __slots__ = ("_pgconn", "_tx", "encoding", "literal")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._pgconn = conn.pgconn
        self._tx = Transformer(PinnedContext(conn))
        #: psycopg's literal, for a type `psycopg_values.literal` does not cover.
        self.literal: Final = self._tx.as_literal
        self.encoding: Final = conn.info.encoding

    def run(self, query: bytes) -> list[Any]:
        """Send ``query`` and return the rows of its last statement (none if it has none);
        a failed statement raises psycopg's exception, a lost connection its
        `psycopg.OperationalError`."""
        pgconn = self._pgconn
        result = pgconn.exec_(query)  # raises OperationalError when libpq has no result
        if pgconn.status == _BAD:
            message = pgconn.get_error_message(self.encoding)
            raise psycopg.OperationalError(f"the connection was lost: {message}")
        status = result.status
        if status == _FATAL_ERROR:
            raise error_from_result(result, encoding=self.encoding)
        if status != _TUPLES_OK:
            return []
        tx = self._tx
        tx.set_pgresult(result)
        return tx.load_rows(0, result.ntuples, tuple)
