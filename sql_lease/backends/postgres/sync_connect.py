"""How `sql_lease.sync` connects to PostgreSQL: libpq parameters from a URL, psycopg's pool.

psycopg (the ``sync`` extra) is imported only when an executor is made, so a sync provider
on SQLite needs only the standard library.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import URL, Engine

from ..._deadlines import server_millis
from ...errors import LeaseValueError
from .pooler_text import PoolerStatements
from .sync import EnginePgSource, PgExecutor, open_pool

__all__ = ["engine_executor", "libpq_kwargs", "url_executor"]


def libpq_kwargs(url: URL) -> dict[str, Any]:
    """psycopg's connection keywords for ``url`` (libpq parameters of its query passed on)."""
    kwargs: dict[str, Any] = {}
    for name, value in (
        ("host", url.host),
        ("port", url.port),
        ("user", url.username),
        ("password", url.password),
        ("dbname", url.database),
    ):
        if value is not None:
            kwargs[name] = value
    for name, given in url.query.items():
        if not isinstance(given, str):
            raise LeaseValueError(f"the URL gives {name} more than once")
        if name == "ssl":  # asyncpg's spelling
            kwargs.setdefault("sslmode", given)
        elif name != "dsn":
            kwargs[name] = given
    return kwargs


def url_executor(
    url: URL,
    table: str,
    *,
    where: str,
    timeout: float,
    connect_timeout: float,
    synchronous_commit: bool,
    pool_size: int,
    pooler: str | None = None,
    listen_url: URL | None = None,
) -> PgExecutor:
    """An executor owning a psycopg pool for ``url``: autocommit, server-side statement and
    lock timeouts at `SERVER_SHARE` of ``timeout``, no prepared statements.

    Straight to the server the timeouts are startup options. Behind a pooler (``pooler``:
    ``"transaction"`` or ``"session"``) nothing but ``application_name`` is sent at startup
    (a pooler refuses the rest) and each call is one simple query that sets them for itself
    (`pooler_text`). The LISTEN connection of waiters connects to ``listen_url`` when given,
    else to ``url`` except behind a transaction pooler (which cannot carry LISTEN: waiters
    then poll).
    """
    kwargs = libpq_kwargs(url)
    kwargs.setdefault("application_name", "sql_lease")
    kwargs["connect_timeout"] = max(1, round(connect_timeout))
    kwargs["autocommit"] = True
    kwargs["prepare_threshold"] = None
    listen: dict[str, Any] | None = {k: v for k, v in kwargs.items() if k != "prepare_threshold"}
    if listen_url is not None:
        listen = libpq_kwargs(listen_url)
        listen.setdefault("application_name", kwargs["application_name"])
        listen["connect_timeout"] = kwargs["connect_timeout"]
        listen["autocommit"] = True
    elif pooler == "transaction":
        listen = None
    statements = None
    if pooler is None:
        millis = server_millis(timeout)
        options = f"-c statement_timeout={millis} -c lock_timeout={millis} -c TimeZone=UTC"
        if not synchronous_commit:
            options += " -c synchronous_commit=off"
        kwargs["options"] = (kwargs.get("options", "") + " " + options).strip()
    else:
        statements = PoolerStatements(timeout)
    pool = open_pool(kwargs, size=pool_size, timeout=timeout)
    return PgExecutor(pool, where=where, table=table, listen_kwargs=listen, statements=statements)


def engine_executor(engine: Engine, table: str, *, where: str, timeout: float) -> PgExecutor:
    """An executor borrowing connections from a caller's ``engine`` (never disposed)."""
    kwargs = libpq_kwargs(engine.url.set(drivername="postgresql"))
    kwargs["autocommit"] = True
    kwargs.setdefault("connect_timeout", max(1, round(timeout)))
    return PgExecutor(EnginePgSource(engine), where=where, table=table, listen_kwargs=kwargs)
