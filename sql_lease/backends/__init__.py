"""The backend seam: what the SQL provider needs from a database, one package per database.

A `Backend` owns everything that differs between databases: its URL schemes and their checks,
the statement catalogue and the names of its extra tables, the driver adaptor (a bound
``fetch`` per pooled connection), its one error classifier and translation, the engine
defaults of ``from_url``, its wake-up source (PostgreSQL's LISTEN/NOTIFY; none for SQLite,
whose waiters poll) and the executor of the sync provider. `backend_for` picks one from an engine's
dialect. This module imports no driver: each backend package imports its own, and only it.

Adding a database: a new package here implementing `Backend`, a line in `_BACKENDS`, a
migration branch for its DDL, and a test fixture line (see ARCHITECTURE.md).
"""

from __future__ import annotations

import importlib
import re
from typing import Any, Final, Protocol

from sqlalchemy.engine import URL, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import Pool, PoolProxiedConnection

from .._core.failures import Failure
from ..capabilities import WakeupSink, WakeupSource
from ..catalogue import Catalogue
from ..errors import LeaseDatabaseError, LeaseSchemaError, LeaseValueError
from ._plan import Adaptor, CatalogueNow, Fetch, Plan, PlanOptions, planned_arguments

__all__ = [
    "BACKEND_PACKAGES",
    "POOLED",
    "Adaptor",
    "AsyncExecution",
    "Backend",
    "CatalogueNow",
    "Dialect",
    "Fetch",
    "Migrations",
    "MissingDatabaseFile",
    "Plan",
    "PlanOptions",
    "SyncExecution",
    "SyncExecutor",
    "SyncListener",
    "backend_for",
    "backend_for_dialect",
    "backend_for_scheme",
    "backend_for_sync_engine",
    "backend_for_url",
    "backend_named",
    "planned_arguments",
    "quote_ident",
]

_DERIVED: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def quote_ident(name: str) -> str:
    """Quote an identifier built from validated names, as every backend's SQL quotes it
    (derived names may exceed the 40 characters allowed for a table or schema name, never
    PostgreSQL's 63)."""
    if not _DERIVED.fullmatch(name):
        raise ValueError(f"not a plain identifier: {name!r}")
    return '"' + name + '"'


class MissingDatabaseFile(LeaseSchemaError):
    """The database file does not exist (SQLite): the migrations create it. Raised by a
    backend that opens only existing files; the migrations facade tells it apart."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"the SQLite database {path} does not exist: create it and its leases table with "
            f"the migrations (`sql-lease migrate --url sqlite:///{path}` or "
            "`sql_lease.migrate.upgrade(url)`)"
        )
        self.path = path


class SyncExecutor(Protocol):
    """What runs a statement for `sql_lease.sync`: made by `Backend.sync_url_executor` or
    `Backend.sync_engine_executor`, on its backend's sync driver."""

    #: True when releases and transfers of wanted keys send a notification.
    notifies: bool
    #: The redacted URL, for messages.
    where: str
    #: How a dedicated LISTEN connection connects (PostgreSQL), else None.
    listen_kwargs: dict[str, Any] | None

    def run(
        self, operation: str, write: bool, sql: str, args: tuple[object, ...], seconds: float
    ) -> list[tuple[Any, ...]]:
        """Run ``sql`` with ``args`` within ``seconds``; its rows (a `LeaseError` on failure)."""
        ...

    def close(self) -> None: ...


class SyncListener(Protocol):
    """The LISTEN thread of `sql_lease.sync`'s waiters (`Backend.sync_listener`)."""

    #: Counts the listener's connections: a new one means notifications may have been lost.
    generation: int

    @property
    def connected(self) -> bool: ...

    def ready(self, within: float) -> bool:
        """Wait up to ``within`` seconds until it listens; whether it does."""
        ...

    def close(self, timeout: float = 2.0) -> None: ...


class Dialect(Protocol):
    """What a database is and says: its names, URL schemes, statements and its one
    classifier (used by every path: async, sync, migrations, `guard`)."""

    #: The database's name as observers report it (``db.system.name``): postgresql, sqlite.
    name: str

    #: The database's name in messages: PostgreSQL, SQLite.
    title: str

    #: Whether tables live in schemas (``schema=`` is refused when not).
    has_schemas: bool

    #: With schemas: the one statement that finds where an unqualified table lives ($1: its
    #: name; rows: the schema), under the session's default search path (`_schema_home`).
    home_sql: str | None

    #: The URL schemes (SQLAlchemy driver names) ``from_url`` takes for this database.
    url_schemes: frozenset[str]

    #: A URL of this database, for messages.
    url_example: str

    def normalize_url(self, url: URL) -> URL:
        """``url`` (one of `url_schemes`) checked and set to `async_driver`
        (`LeaseValueError`, never quoting the URL)."""
        ...

    def split_hosts(self, scheme: str, rest: str) -> tuple[str, dict[str, str]]:
        """A URL ``scheme://rest`` (``scheme`` one of `url_schemes`) before it is parsed: the
        text to parse and the query parameters to add (PostgreSQL: a libpq host list moves to
        ``host=``/``port=``; most return ``(f"{scheme}://{rest}", {})``)."""
        ...

    def redact(self, url: URL) -> str:
        """``url`` (of `url_schemes`, `async_driver` or `sync_driver`) as text for messages:
        never a password (`sql_lease.backends._urls.hide_secrets`, ``hide_password=True``)."""
        ...

    def catalogue(self, table_name: str, schema: str | None, home: str | None = None) -> Catalogue:
        """Every statement for ``table_name`` (already validated), built once; ``home`` is
        the schema found for it when ``schema`` is None (`_schema_home`)."""
        ...

    def classify(self, exc: BaseException) -> Failure:
        """The one classifier: what a driver, pool or SQLAlchemy exception means."""
        ...

    def translate(
        self,
        exc: BaseException,
        *,
        operation: str,
        where: str,
        sent: bool,
        table: str,
        timed_out: bool = False,
    ) -> LeaseDatabaseError:
        """``exc`` as a typed `LeaseError` (the caller chains it)."""
        ...


class AsyncExecution(Protocol):
    """How the async provider runs statements on this database: engine defaults, the
    per-connection adaptor, cancellation, wake-ups."""

    #: The SQLAlchemy async dialect+driver the async provider runs on.
    async_driver: str

    def url_connect_args(self, url: URL) -> tuple[URL, dict[str, Any]]:
        """An engine's URL (a `plan`'s, or a migration's) without the parameters its driver
        cannot read from a URL, and those as connect arguments (most: ``(url, {})``)."""
        ...

    def adaptor(self, timeout: float, synchronous_commit: bool) -> Adaptor:
        """The per-connection setup for statements bounded by ``timeout`` seconds."""
        ...

    async def settle(self, fairy: PoolProxiedConnection) -> None:
        """After a statement was cancelled mid-flight: wait (bounded) until the cancellation
        has reached the server, so the statement cannot apply later. The caller drops it."""
        ...

    def plan(self, url: URL, options: PlanOptions) -> Plan:
        """Everything ``from_url`` builds for ``url`` (a `normalize_url` URL) with ``options``,
        in one decision: engine defaults, the async driver behind a ``pooler`` (a
        `LeaseValueError`, before any I/O, when the backend has none), the adaptor, the
        checks on the built engine, and whether waiters can LISTEN."""
        ...

    def wakeup_source(
        self, pool: Pool, channel: str, timeout: float, sink: WakeupSink
    ) -> WakeupSource | None:
        """A notification channel feeding ``sink``, or None when the database has none."""
        ...

    def key_groups(
        self, pool: Pool, catalogue: Catalogue, keys: list[bytes]
    ) -> list[list[int]] | None:
        """How a batch of calls on ``keys`` splits into statements the database takes in one
        go (the indexes of ``keys``, by group), or None: one statement (most backends; on
        Citus, one per worker holding some of the keys)."""
        ...


class SyncExecution(Protocol):
    """How `sql_lease.sync` runs statements on this database, and listens."""

    #: The SQLAlchemy dialect+driver of a caller's sync engine for `sql_lease.sync`.
    sync_driver: str

    def sync_url_executor(
        self,
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
        catalogue: CatalogueNow | None = None,
    ) -> SyncExecutor:
        """The sync provider's executor owning up to ``pool_size`` connections to ``url`` (as
        given, checked by `normalize_url`); calls bounded by ``timeout`` seconds. ``pooler``
        and ``listen_url`` as for `plan` and the async ``from_url``
        (`LeaseValueError`, before any I/O, when the backend has no such thing).
        ``catalogue``: the provider's catalogue as it is now, whose data the executor may
        read (PostgreSQL's pooler mode: `Catalogue.server_calls`; None: it sends the plain
        statements)."""
        ...

    def sync_engine_executor(
        self,
        engine: Engine,
        table: str,
        *,
        where: str,
        timeout: float,
        catalogue: CatalogueNow | None = None,
    ) -> SyncExecutor:
        """The sync provider's executor borrowing connections from a caller's ``engine``
        (``catalogue``: the provider's, whose data it may read: PostgreSQL's Citus calls)."""
        ...

    def sync_listener(
        self, channel: str, connect_kwargs: dict[str, Any], sink: WakeupSink
    ) -> SyncListener:
        """The thread that listens on ``channel`` for `sql_lease.sync`'s waiters, connecting
        with an executor's ``listen_kwargs`` (only asked of a backend whose executors have
        them)."""
        ...


class Migrations(Protocol):
    """What the migrations need of this database beyond its statements."""

    def extra_tables(self, table_name: str) -> frozenset[str]:
        """The tables besides the leases table and its version table that the migrations
        create for ``table_name`` on this database (none: an empty set)."""
        ...

    def migration_connect_args(
        self,
        *,
        timeout: float | None,
        connect_timeout: float,
        busy_seconds: float,
        create: bool,
        pooler: str | None = None,
    ) -> dict[str, Any]:
        """``connect_args`` of a migration's own engine (``create``: it may create the
        database, as an upgrade of a SQLite file does; ``pooler``: as for `plan`,
        no startup parameter a pooler refuses)."""
        ...

    async def begin_migration(
        self,
        conn: AsyncConnection,
        *,
        prepare: bool,
        busy: float,
        server_timeout: float | None = None,
        lock_key: int | None = None,
    ) -> None:
        """Set a migration connection up (``prepare``: for an upgrade) and begin its write
        transaction; ``server_timeout``: seconds of server-side statement and lock timeout
        set inside that transaction (behind a pooler, where connecting cannot set them);
        ``lock_key``: serialise with other migrators on it, within that transaction (a
        backend whose write transaction is already exclusive, as SQLite's, ignores it)."""
        ...


class Backend(Dialect, AsyncExecution, SyncExecution, Migrations, Protocol):
    """One database behind the SQL provider (see the module docstring): the four small
    protocols together, what each backend package's ``BACKEND`` implements."""


_BACKENDS: Final = {
    ("postgresql", "asyncpg"): "postgres",
    ("sqlite", "aiosqlite"): "sqlite",
    ("mariadb", "asyncmy"): "mariadb",
}
#: Engines only ``from_url`` builds (marked with the `POOLED` execution option): PostgreSQL
#: behind a transaction pooler runs on psycopg (see the backend's ``plan``).
_POOLED_BACKENDS: Final = {("postgresql", "psycopg"): "postgres"}
POOLED: Final = "sql_lease_pooler"
#: The backend packages, in the order URL schemes are looked up.
BACKEND_PACKAGES: Final = tuple(dict.fromkeys(_BACKENDS.values()))


def backend_named(package: str) -> Backend:
    """The backend of ``sql_lease.backends.<package>`` (imported on first use)."""
    module = importlib.import_module(f"{__name__}.{package}")
    backend: Backend = module.BACKEND
    return backend


def backend_for(engine: AsyncEngine) -> Backend:
    """The backend for ``engine``'s dialect; `LeaseValueError` for an unsupported one."""
    dialect = engine.dialect
    package = _BACKENDS.get((dialect.name, dialect.driver))
    if package is None and engine.sync_engine.get_execution_options().get(POOLED):
        package = _POOLED_BACKENDS.get((dialect.name, dialect.driver))
    if package is None:
        raise LeaseValueError(
            "SqlLeaseProvider needs a postgresql+asyncpg or sqlite+aiosqlite engine, not "
            f"{dialect.name}+{dialect.driver}"
        )
    return backend_named(package)


def backend_for_scheme(scheme: str) -> Backend | None:
    """The backend whose `url_schemes` (or `sync_driver`) has ``scheme``; None if none has."""
    for package in BACKEND_PACKAGES:
        backend = backend_named(package)
        if scheme in backend.url_schemes or scheme == backend.sync_driver:
            return backend
    return None


def backend_for_sync_engine(engine: Engine) -> Backend | None:
    """The backend whose `sync_driver` ``engine`` runs on, or None."""
    driver = f"{engine.dialect.name}+{engine.dialect.driver}"
    backend = backend_for_scheme(driver)
    return backend if backend is not None and backend.sync_driver == driver else None


def backend_for_dialect(dialect: str) -> Backend | None:
    """The backend of the SQLAlchemy dialect named ``dialect`` (its `name`), or None."""
    for (name, _), package in _BACKENDS.items():
        if name == dialect:
            return backend_named(package)
    return None


def backend_for_url(url: URL) -> Backend:
    """The backend for a `normalize_url` URL (``postgresql+asyncpg`` or ``sqlite+aiosqlite``)."""
    name, _, driver = url.drivername.partition("+")
    package = _BACKENDS.get((name, driver))
    if package is None:
        raise LeaseValueError(f"unsupported database URL scheme {url.drivername!r}")
    return backend_named(package)
