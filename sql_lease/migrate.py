"""Apply the library's Alembic migrations from Python (the installed package ships them).

    from sql_lease import migrate
    migrate.upgrade("postgresql://user:pass@host/db")          # to head
    print(migrate.upgrade(None, sql=True))                      # the SQL, no database
    await migrate.upgrade_async(engine)                          # inside an event loop
    migrate.check(url, timeout=2)                               # readiness: True at head

The migrations record their version in ``<table>_alembic_version`` (``leases_alembic_version``
by default), never in ``alembic_version``, so they coexist with an application's own history;
`include_name` keeps the application's own autogenerate away from the library's tables.

``timeout`` bounds a whole call, connecting included (``None``: no bound), and
``connect_timeout`` the opening of the connection; past either, `LeaseTimeoutError` (see
`sql_lease._migrating.runner`). ``pooler="transaction"`` or ``"session"``: the URL reaches
PostgreSQL through a connection pooler (PgBouncer and the like), as for
`SqlLeaseProvider.from_url`: no startup parameter but ``application_name``, only unnamed
statements, and the server-side timeouts set inside the migration's one transaction. On
SQLite, an upgrade creates the file if needed and puts it in WAL mode; the other calls never
create a file (a missing file is at no revision). Every process may upgrade at once: on
PostgreSQL migrators take turns on an advisory lock (`migration_lock_key`), one applies each
revision, the others find it applied (past ``timeout``, `LeaseTimeoutError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from ._core.validate import check_identifier
from ._migrating.app_alembic import IncludeName, exclude_leases, include_name, lease_table_names
from ._migrating.runner import (
    DEFAULT_CONNECT_TIMEOUT,
    Bounds,
    check_target,
    run_env_online,
    run_on_connection,
)
from .backends import MissingDatabaseFile, backend_for_url, quote_ident
from .backends._urls import normalize_url
from .errors import LeaseError, LeaseValueError
from .schema import DEFAULT_TABLE, fence_sequence_name, migration_lock_key, version_table_name

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MIGRATION_TIMEOUT",
    "DEFAULT_PROBE_TIMEOUT",
    "ENV_URL",
    "IncludeName",
    "MigrationNames",
    "check",
    "check_async",
    "current",
    "current_async",
    "downgrade",
    "downgrade_async",
    "exclude_leases",
    "head",
    "include_name",
    "lease_table_names",
    "make_config",
    "migration_lock_key",
    "migration_names",
    "run_env_online",
    "script_location",
    "upgrade",
    "upgrade_async",
]

ENV_URL = "SQL_LEASE_DATABASE_URL"
ENV_TABLE = "SQL_LEASE_TABLE"
ENV_SCHEMA = "SQL_LEASE_SCHEMA"
_OFFLINE_URL = "postgresql+asyncpg://"

DEFAULT_PROBE_TIMEOUT: Final = 5.0  #: seconds for `current` and `check`, end to end
DEFAULT_MIGRATION_TIMEOUT: Final = 60.0  #: seconds for `upgrade` and `downgrade`, end to end


@dataclass(frozen=True, slots=True)
class MigrationNames:
    """The database objects one set of migrations manages."""

    table: str = DEFAULT_TABLE
    schema: str | None = None

    def __post_init__(self) -> None:
        check_identifier("table_name", self.table)
        if self.schema is not None:
            check_identifier("schema", self.schema)

    @property
    def sequence(self) -> str:
        return fence_sequence_name(self.table)

    @property
    def version_table(self) -> str:
        return version_table_name(self.table)

    def qualified(self, name: str) -> str:
        """``name`` quoted, with the schema when there is one."""
        quoted = quote_ident(name)  # derived names (table + suffix) may be up to 63 characters
        return quoted if self.schema is None else f'"{self.schema}".{quoted}'


@dataclass(frozen=True, slots=True)
class _Settings:
    url: str
    names: MigrationNames


def script_location() -> str:
    """The migrations folder: shipped in the wheel, or the checkout's ``migrations/``."""
    shipped = Path(__file__).resolve().parent / "_migrations"
    if (shipped / "env.py").is_file():
        return str(shipped)
    checkout = Path(__file__).resolve().parent.parent / "migrations"
    if (checkout / "env.py").is_file():
        return str(checkout)
    raise LeaseError("sql_lease's migrations are missing from this installation")


def make_config(
    url: str | URL | None = None,
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
    output: Any = None,
) -> Config:
    """An Alembic `Config` for the library's migrations (no ini file needed)."""
    names = MigrationNames(table_name, schema)
    cfg = Config(output_buffer=output) if output is not None else Config()
    cfg.set_main_option("script_location", script_location())
    cfg.attributes["sql_lease_names"] = names
    if url is not None:
        cfg.attributes["sql_lease_url"] = normalize_url(url).render_as_string(hide_password=False)
    return cfg


def resolve_settings(cfg: Config) -> _Settings:
    """Settings for ``migrations/env.py``: attributes, then ``-x``, then the environment."""
    from alembic import context

    x: dict[str, str] = context.get_x_argument(as_dictionary=True)
    names = cfg.attributes.get("sql_lease_names")
    if names is None:
        schema = x.get("schema") or os.environ.get(ENV_SCHEMA) or None
        names = MigrationNames(x.get("table") or os.environ.get(ENV_TABLE) or DEFAULT_TABLE, schema)
    url = cfg.attributes.get("sql_lease_url") or x.get("url") or os.environ.get(ENV_URL)
    if url:
        url = normalize_url(url).render_as_string(hide_password=False)
    elif cfg.attributes.get("connection") is None:
        if not context.is_offline_mode():
            raise LeaseValueError(
                f"no database URL: set {ENV_URL} (or pass -x url=...) to run migrations"
            )
        url = _OFFLINE_URL
    return _Settings(url=str(url or _OFFLINE_URL), names=names)


def migration_names() -> MigrationNames:
    """The names the running migration applies to (for revision scripts)."""
    from alembic import context

    names: MigrationNames = context.config.attributes["sql_lease_names"]
    return names


def head() -> str:
    """The newest revision the installed library ships."""
    cfg = make_config()
    heads = ScriptDirectory.from_config(cfg).get_heads()
    return heads[0]


# -- running commands ----------------------------------------------------------------------

T = TypeVar("T")


def _command(
    conn: Connection, name: str, revision: str, table_name: str, schema: str | None
) -> None:
    cfg = make_config(table_name=table_name, schema=schema)
    cfg.attributes["connection"] = conn
    getattr(command, name)(cfg, revision)


def _current(conn: Connection, table_name: str, schema: str | None) -> str | None:
    names = MigrationNames(table_name, schema)
    ctx = MigrationContext.configure(
        conn, opts={"version_table": names.version_table, "version_table_schema": schema}
    )
    heads = ctx.get_current_heads()
    return heads[0] if heads else None


def _prepare(operation: str, target: object, table_name: str, schema: str | None) -> None:
    """Every argument checked before any I/O."""
    check_target(target, operation)
    MigrationNames(table_name, schema)
    if not isinstance(target, str | URL):
        return
    backend = backend_for_url(normalize_url(target))
    if schema is not None and not backend.has_schemas:
        raise LeaseValueError(f"{backend.title} has no schemas: leave schema=None")


async def _migrate(
    name: str,
    target: str | URL | AsyncEngine,
    revision: str,
    table_name: str,
    schema: str | None,
    bounds: Bounds,
) -> None:
    _prepare(name, target, table_name, schema)
    args = (_command, name, revision, table_name, schema)
    # Only an upgrade creates a missing SQLite file; there is nothing to downgrade in none.
    with contextlib.suppress(MissingDatabaseFile):
        await run_on_connection(
            target,
            *args,
            operation=name,
            bounds=bounds,
            write=True,
            wal=name == "upgrade",
            lock_key=migration_lock_key(table_name, schema),
        )


async def upgrade_async(
    target: str | URL | AsyncEngine,
    revision: str = "head",
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
    timeout: float | None = DEFAULT_MIGRATION_TIMEOUT,  # noqa: ASYNC109
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    pooler: str | None = None,
) -> None:
    """Upgrade the leases schema of ``target`` (a URL or an `AsyncEngine`) to ``revision``.

    Idempotent, one transaction. A SQLite file is created if missing and put in WAL mode.
    """
    bounds = Bounds.of(timeout, connect_timeout, pooler)
    await _migrate("upgrade", target, revision, table_name, schema, bounds)


async def downgrade_async(
    target: str | URL | AsyncEngine,
    revision: str = "base",
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
    timeout: float | None = DEFAULT_MIGRATION_TIMEOUT,  # noqa: ASYNC109
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    pooler: str | None = None,
) -> None:
    """Downgrade to ``revision``; ``base`` drops the table, sequence and version table.

    A SQLite file that does not exist is left alone (there is nothing to downgrade).
    """
    bounds = Bounds.of(timeout, connect_timeout, pooler)
    await _migrate("downgrade", target, revision, table_name, schema, bounds)


async def _current_async(
    operation: str,
    target: str | URL | AsyncEngine,
    table_name: str,
    schema: str | None,
    bounds: Bounds,
) -> str | None:
    _prepare(operation, target, table_name, schema)
    try:
        result: str | None = await run_on_connection(
            target, _current, table_name, schema, operation=operation, bounds=bounds, write=False
        )
    except MissingDatabaseFile:
        return None
    return result


async def current_async(
    target: str | URL | AsyncEngine,
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
    timeout: float | None = DEFAULT_PROBE_TIMEOUT,  # noqa: ASYNC109
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    pooler: str | None = None,
) -> str | None:
    """The revision the database is at, or None when the migrations were never applied."""
    bounds = Bounds.of(timeout, connect_timeout, pooler)
    return await _current_async("current", target, table_name, schema, bounds)


async def check_async(
    target: str | URL | AsyncEngine,
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
    timeout: float | None = DEFAULT_PROBE_TIMEOUT,  # noqa: ASYNC109
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    pooler: str | None = None,
) -> bool:
    """True when the database is at the head revision this library ships."""
    return await _check_async(
        target, table_name, schema, Bounds.of(timeout, connect_timeout, pooler)
    )


async def _check_async(
    target: str | URL | AsyncEngine, table_name: str, schema: str | None, bounds: Bounds
) -> bool:
    return await _current_async("check", target, table_name, schema, bounds) == head()


def _run(name: str, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(make())``, refused with a pointer to the async form inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    raise LeaseError(
        f"migrate.{name}() cannot run inside a running event loop: "
        f"use `await migrate.{name}_async(...)`"
    )


def _offline(name: str, url: str | URL | None, revision: str, names: MigrationNames) -> str:
    buffer = io.StringIO()
    cfg = make_config(url, table_name=names.table, schema=names.schema, output=buffer)
    getattr(command, name)(cfg, revision, sql=True)
    return buffer.getvalue()


def upgrade(
    url: str | URL | None,
    revision: str = "head",
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
    sql: bool = False,
    timeout: float | None = DEFAULT_MIGRATION_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    pooler: str | None = None,
) -> str | None:
    """Upgrade to ``revision``. With ``sql=True`` return the SQL instead (no database used)."""
    if sql:
        return _offline("upgrade", url, revision, MigrationNames(table_name, schema))
    if url is None:
        raise LeaseValueError("upgrade needs a database URL unless sql=True")
    bounds = Bounds.of(timeout, connect_timeout, pooler)
    _run("upgrade", lambda: _migrate("upgrade", url, revision, table_name, schema, bounds))
    return None


def downgrade(
    url: str | URL | None,
    revision: str = "base",
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
    sql: bool = False,
    timeout: float | None = DEFAULT_MIGRATION_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    pooler: str | None = None,
) -> str | None:
    """Downgrade to ``revision``. With ``sql=True`` return the SQL (offline needs ``FROM:TO``)."""
    if sql:
        return _offline("downgrade", url, revision, MigrationNames(table_name, schema))
    if url is None:
        raise LeaseValueError("downgrade needs a database URL unless sql=True")
    bounds = Bounds.of(timeout, connect_timeout, pooler)
    _run("downgrade", lambda: _migrate("downgrade", url, revision, table_name, schema, bounds))
    return None


def current(
    url: str | URL,
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
    timeout: float | None = DEFAULT_PROBE_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    pooler: str | None = None,
) -> str | None:
    """The revision the database is at, or None."""
    bounds = Bounds.of(timeout, connect_timeout, pooler)
    return _run("current", lambda: _current_async("current", url, table_name, schema, bounds))


def check(
    url: str | URL,
    *,
    table_name: str = DEFAULT_TABLE,
    schema: str | None = None,
    timeout: float | None = DEFAULT_PROBE_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    pooler: str | None = None,
) -> bool:
    """True when the database is at head (a readiness check for deploy pipelines)."""
    bounds = Bounds.of(timeout, connect_timeout, pooler)
    return _run("check", lambda: _check_async(url, table_name, schema, bounds))
