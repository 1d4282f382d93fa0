"""Running the library's migrations on one connection, bounded in time (for `sql_lease.migrate`).

``timeout`` bounds the whole call, connecting included (a client-side deadline); on PostgreSQL
the server's ``statement_timeout`` and ``lock_timeout`` are set to 80% of it so that the server
gives up first and the migration's transaction rolls back cleanly. ``connect_timeout`` bounds
opening the connection. A call past a bound raises `LeaseTimeoutError`.

Behind a connection pooler (``pooler="transaction"`` or ``"session"``, a URL only) the
connection sends no startup parameter the pooler refuses and uses only unnamed statements;
the server's timeouts are then set with ``SET LOCAL`` inside the migration's one transaction
(reads, `current` and `check`, have only the client-side bound), as they are on an engine of
the caller's.

On PostgreSQL a migration first takes a transaction-level advisory lock
(``pg_advisory_xact_lock`` on `sql_lease.schema.migration_lock_key`, fixed per version table)
in its own transaction, before Alembic reads the version table: concurrent migrators (every
process upgrading at start-up) run one after the other, the later ones find the revisions
applied, and the lock is released by the commit or rollback, behind a transaction pooler
too. Waiting for it is bounded by the server's ``lock_timeout`` and the call's deadline.

On SQLite a migration writes in one ``BEGIN IMMEDIATE`` transaction: it takes the write lock
before it reads the version table (a read that later writes cannot wait for the lock, and
would fail at once while another process writes), so concurrent migrators run one after the
other and the second finds nothing to do; the DDL is atomic too. An upgrade first puts the
file in WAL mode (`ensure_wal`), once, so that no connection opened later has to switch it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from alembic.config import Config
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import NullPool

from .._core.deadlines import SERVER_SHARE
from .._core.provider_args import check_pooler, check_seconds
from ..backends import MissingDatabaseFile, backend_for, backend_for_url
from ..backends._urls import build_engine, normalize_url, redact
from ..errors import LeaseError, LeaseTypeError, LeaseValueError
from ..schema import migration_lock_key

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "Bounds",
    "Target",
    "check_seconds",
    "check_target",
    "run_env_online",
    "run_on_connection",
]

T = TypeVar("T")

DEFAULT_CONNECT_TIMEOUT: Final = 5.0  #: seconds to open a connection
SQLITE_BUSY_DEFAULT: Final = 5.0  # SQLite's busy timeout when the call has no ``timeout``


@dataclass(frozen=True, slots=True)
class Bounds:
    """How long a migration call may take (seconds; ``timeout=None``: no overall bound), and
    the connection pooler in front of the database, if any."""

    timeout: float | None
    connect_timeout: float
    pooler: str | None = None

    @classmethod
    def of(cls, timeout: object, connect_timeout: object, pooler: object = None) -> Bounds:
        seconds = None if timeout is None else check_seconds("timeout", timeout)
        name = check_pooler(pooler, True)
        return cls(seconds, check_seconds("connect_timeout", connect_timeout), name)

    @property
    def server_timeout(self) -> float | None:
        """Server-side statement and lock timeout to set in the transaction (behind a pooler,
        where the connection cannot carry them), else None."""
        if self.pooler is None or self.timeout is None:
            return None
        return self.timeout * SERVER_SHARE

    @property
    def in_transaction_timeout(self) -> float | None:
        """The server-side timeouts for a connection that carries none (the caller's engine)."""
        return None if self.timeout is None else self.timeout * SERVER_SHARE

    @property
    def busy_seconds(self) -> float:
        """SQLite's busy timeout: how long to wait for another process's write lock."""
        return SQLITE_BUSY_DEFAULT if self.timeout is None else self.timeout * SERVER_SHARE


Target = str | URL | AsyncEngine


def check_target(target: object, operation: str) -> None:
    """A URL (text or `URL`) or an `AsyncEngine`; anything else is a `LeaseTypeError`."""
    if isinstance(target, Engine):
        raise LeaseTypeError(
            f"migrate.{operation}_async needs an AsyncEngine or a URL, not a synchronous "
            "Engine: pass create_async_engine(...) or the URL (or call migrate."
            f"{operation}(url) without an event loop)"
        )
    if not isinstance(target, str | URL | AsyncEngine):
        raise LeaseTypeError(
            f"migrate.{operation}_async needs a database URL or an AsyncEngine, "
            f"not {type(target).__name__}"
        )


def _engine_for(target: Target, bounds: Bounds, *, create: bool) -> tuple[AsyncEngine, bool]:
    """The engine to use and whether this call owns it (and so disposes of it)."""
    if isinstance(target, AsyncEngine):
        if bounds.pooler is not None:
            raise LeaseValueError(
                "pooler= applies to a URL: an AsyncEngine's connect arguments are its own "
                "(behind a pooler, give it statement_cache_size=0 and no server_settings)"
            )
        return target, False
    url = normalize_url(target)
    connect_args = backend_for_url(url).migration_connect_args(
        timeout=bounds.timeout,
        connect_timeout=bounds.connect_timeout,
        busy_seconds=bounds.busy_seconds,
        create=create,
        pooler=bounds.pooler,
    )
    return build_engine(url, poolclass=NullPool, connect_args=connect_args), True


async def _within(seconds: float | None, work: Coroutine[Any, Any, T]) -> T:
    """``await work``, or `TimeoutError` after ``seconds`` without waiting for its cleanup.

    Cancelled mid-statement, SQLAlchemy closes the connection gracefully for up to 2 s more
    (shielded); that cleanup goes on in the background so that the caller's bound holds.
    """
    if seconds is None:
        return await work
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.wait_for(asyncio.shield(task), seconds)
    except (TimeoutError, asyncio.CancelledError):
        task.cancel()
        task.add_done_callback(_retrieve)
        raise


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # seen: no "exception was never retrieved" warning


async def run_on_connection(
    target: Target,
    fn: Callable[..., Any],
    *args: Any,
    operation: str,
    bounds: Bounds,
    write: bool,
    wal: bool = False,
    lock_key: int | None = None,
) -> Any:
    """``fn(sync_connection, *args)`` on one connection to ``target``, within ``bounds``.

    ``write``: in one transaction, committed at the end (``BEGIN IMMEDIATE`` on SQLite),
    serialised with other migrators on ``lock_key`` (PostgreSQL's advisory lock).
    ``wal``: on SQLite, put the file in WAL mode first (and create it if missing; other
    calls never create a file). Failures are `LeaseError`s labelled ``operation``, except
    Alembic's own (an unknown revision...), which pass unchanged.
    """
    engine, owned = _engine_for(target, bounds, create=wal)
    where = redact(engine.url)
    try:
        work = _run(engine, owned, fn, args, bounds, write, wal, lock_key)
        return await _within(bounds.timeout, work)
    except LeaseError:
        raise
    except Exception as exc:
        if type(exc).__module__.startswith("alembic"):
            raise
        raise backend_for(engine).translate(
            exc, operation=operation, where=where, sent=True, table="(migrations)"
        ) from exc


async def _run(
    engine: AsyncEngine,
    owned: bool,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    bounds: Bounds,
    write: bool,
    wal: bool,
    lock_key: int | None,
) -> Any:
    # An engine of the caller's carries no server timeouts of ours: set them in the transaction.
    server_timeout = bounds.server_timeout if owned else bounds.in_transaction_timeout
    try:
        async with engine.connect() as conn:
            if not write:
                return await conn.run_sync(fn, *args)
            await backend_for(engine).begin_migration(
                conn,
                prepare=wal,
                busy=bounds.busy_seconds,
                server_timeout=server_timeout,
                lock_key=lock_key,
            )
            result = await conn.run_sync(fn, *args)
            await conn.commit()
            return result
    finally:
        if owned:
            await engine.dispose()


# -- the alembic command line (migrations/env.py; `sql_lease.migrate` re-exports it) --------

_READ_ONLY_COMMANDS = frozenset({"current", "check"})


def run_env_online(cfg: Config, url: str, run: Callable[[Connection], None]) -> None:
    """For ``migrations/env.py`` run by ``alembic``: ``run(connection)`` with the facade's
    bounds and SQLite handling (see `upgrade_async`); failures raise Alembic's
    `CommandError`, which the ``alembic`` command prints as one line."""
    from alembic.util import CommandError

    cmd = getattr(cfg.cmd_opts, "cmd", None)
    name = getattr(cmd[0], "__name__", "") if isinstance(cmd, tuple) and cmd else ""
    write = name not in _READ_ONLY_COMMANDS
    bounds = Bounds.of(None, DEFAULT_CONNECT_TIMEOUT)
    names = cfg.attributes["sql_lease_names"]
    try:
        asyncio.run(
            run_on_connection(
                url,
                run,
                operation=name or "migrate",
                bounds=bounds,
                write=write,
                wal=name == "upgrade",
                lock_key=migration_lock_key(names.table, names.schema),
            )
        )
    except MissingDatabaseFile:
        return  # only an upgrade creates a file: nothing to show or downgrade
    except LeaseError as exc:
        raise CommandError(str(exc)) from exc
