"""From a URL or a caller's engine to an executor: driver choice, timeouts, connect settings.

URLs take the async `from_url`'s forms (checked by `sql_lease._urls.normalize_url`) and map to
the sync drivers: PostgreSQL to psycopg 3 with libpq parameters passed through, SQLite to
`sqlite3` on the same file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError

from .._urls import normalize_url, redact
from ..backends.sqlite.sync import EngineSqliteSource, FileSqliteSource, SqliteExecutor, pragmas
from ..errors import LeaseTypeError, LeaseValueError

if TYPE_CHECKING:
    from ..backends.postgres.sync import PgExecutor

__all__ = ["Target", "check_seconds", "engine_executor", "parse", "url_executor"]

SERVER_SHARE: Final = 0.8  # server-side statement/lock timeout as a share of the timeout
_MAX_SECONDS: Final = 86_400.0
_PG_DRIVERS: Final = frozenset(
    {"postgresql", "postgres", "postgresql+asyncpg", "postgres+asyncpg", "postgresql+psycopg"}
)
_SQLITE_DRIVERS: Final = frozenset({"sqlite", "sqlite+aiosqlite", "sqlite+pysqlite"})


def check_seconds(what: str, value: object) -> float:
    """A number of seconds above 0 and at most a day (the async provider's rule)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise LeaseTypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not (0 < value <= _MAX_SECONDS):
        raise LeaseValueError(
            f"{what} must be a number of seconds above 0 and at most {_MAX_SECONDS:.0f} "
            f"(one day), not {value!r}"
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed URL: the database it names and how to show it."""

    url: URL
    sqlite: bool
    where: str


def parse(url: str | URL) -> Target:
    """Parse and check ``url`` as the async `from_url` does; raises `LeaseValueError`."""
    try:
        parsed = url if isinstance(url, URL) else make_url(url)
    except (ArgumentError, ValueError, TypeError):
        normalize_url("")  # raises the async provider's message (never quoting the URL)
        raise  # pragma: no cover
    name = parsed.drivername
    if name in _SQLITE_DRIVERS:
        checked = normalize_url(parsed.set(drivername="sqlite"))
        return Target(checked, True, redact(checked.set(drivername="sqlite")))
    if name not in _PG_DRIVERS:
        normalize_url(parsed)  # the async provider's message for an unknown scheme
        raise LeaseValueError(  # pragma: no cover - postgresql+psycopg is the only extra
            f"unsupported database URL scheme {name!r}"
        )
    normalize_url(parsed.set(drivername="postgresql"))
    plain = parsed.set(drivername="postgresql")
    return Target(plain, False, redact(plain))


def _libpq_kwargs(url: URL) -> dict[str, Any]:
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
    target: Target,
    table: str,
    *,
    timeout: float,
    connect_timeout: float,
    synchronous_commit: bool,
    pool_size: int,
) -> PgExecutor | SqliteExecutor:
    """An executor owning its connections to ``target``."""
    if target.sqlite:
        path = target.url.database
        assert path is not None
        source = FileSqliteSource(
            path, settings=pragmas(timeout, synchronous_commit), size=pool_size
        )
        return SqliteExecutor(source, where=target.where, table=table)
    millis = max(1, round(timeout * 1000 * SERVER_SHARE))
    options = f"-c statement_timeout={millis} -c lock_timeout={millis} -c TimeZone=UTC"
    if not synchronous_commit:
        options += " -c synchronous_commit=off"
    kwargs = _libpq_kwargs(target.url)
    kwargs.setdefault("application_name", "sql_lease")
    kwargs["options"] = (kwargs.get("options", "") + " " + options).strip()
    kwargs["connect_timeout"] = max(1, round(connect_timeout))
    kwargs["autocommit"] = True
    kwargs["prepare_threshold"] = None
    listen = {k: v for k, v in kwargs.items() if k not in ("options", "prepare_threshold")}
    # psycopg (the `sync` extra) is imported only here, so SQLite needs only the stdlib.
    from ..backends.postgres.sync import PgExecutor, open_pool

    pool = open_pool(kwargs, size=pool_size, timeout=timeout)
    return PgExecutor(pool, where=target.where, table=table, listen_kwargs=listen)


def engine_executor(engine: Engine, table: str, timeout: float) -> PgExecutor | SqliteExecutor:
    """An executor borrowing connections from a caller's ``engine`` (never disposed)."""
    where = redact(engine.url)
    if engine.dialect.name == "sqlite":
        source = EngineSqliteSource(engine, settings=pragmas(timeout, True))
        return SqliteExecutor(source, where=where, table=table)
    from ..backends.postgres.sync import EnginePgSource, PgExecutor

    kwargs = _libpq_kwargs(engine.url.set(drivername="postgresql"))
    kwargs["autocommit"] = True
    kwargs.setdefault("connect_timeout", max(1, round(timeout)))
    return PgExecutor(EnginePgSource(engine), where=where, table=table, listen_kwargs=kwargs)
