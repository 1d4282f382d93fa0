"""From a URL or a caller's engine to an executor: the backend chooses and makes it.

URLs take the async `from_url`'s forms (checked by the backend's ``normalize_url``) plus each
backend's sync driver name (``postgresql+psycopg``, ``sqlite+pysqlite``); the backend makes
the executor on its sync driver (`sql_lease.backends.Backend.sync_url_executor`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import URL, Engine

from .._core.provider_args import UrlOptions
from ..backends import (
    Backend,
    CatalogueNow,
    SyncExecutor,
    backend_for_scheme,
    backend_for_sync_engine,
)
from ..backends._urls import normalize_url, parse_url, redact
from ..errors import LeaseTypeError, LeaseValueError

__all__ = ["Target", "engine_target", "parse"]


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed URL: its backend, the database it names (as given) and how to show it."""

    backend: Backend
    url: URL
    where: str

    def executor(
        self,
        table: str,
        options: UrlOptions,
        pool_size: int,
        listen: Target | None,
        catalogue: CatalogueNow | None = None,
    ) -> SyncExecutor:
        """An executor owning its connections to this database (through ``options.pooler``;
        waiters listening on ``listen``'s database when given)."""
        if listen is not None and listen.backend is not self.backend:
            raise LeaseValueError("listen_url must be a URL of the same database kind as url")
        try:
            return self.backend.sync_url_executor(
                self.url,
                table,
                where=self.where,
                timeout=options.timeout,
                connect_timeout=options.connect_timeout,
                synchronous_commit=options.synchronous_commit,
                pool_size=pool_size,
                pooler=options.pooler,
                listen_url=None if listen is None else listen.url,
                catalogue=catalogue,
            )
        except ImportError as exc:  # the driver is an extra: name it
            raise ModuleNotFoundError(
                f"sql_lease.sync on {self.backend.title} needs a package that is not "
                f"installed ({exc}): install the `sync` extra of sql-lease (psycopg, "
                "psycopg-pool)",
                name=exc.name,
            ) from exc


def parse(url: str | URL) -> Target:
    """Parse and check ``url`` as the async `from_url` does; raises `LeaseValueError`."""
    # The async provider's parser: its messages (never quoting the URL), libpq's host lists.
    parsed = url if isinstance(url, URL) else parse_url(url)
    backend = backend_for_scheme(parsed.drivername)
    if backend is None:
        normalize_url(parsed)  # the async provider's message for an unknown scheme
        raise LeaseValueError(  # pragma: no cover - normalize_url raised
            f"unsupported database URL scheme {parsed.drivername!r}"
        )
    backend.normalize_url(parsed)  # the checks (a scheme its backend refuses, too)
    plain = parsed.set(drivername=_dialect(backend))
    return Target(backend, plain, redact(plain))


def engine_target(engine: Engine) -> Backend:
    """The backend of a caller's sync ``engine``; `LeaseTypeError`/`LeaseValueError`."""
    if not isinstance(engine, Engine):
        raise LeaseTypeError(f"engine must be a sync Engine, not {type(engine).__name__}")
    backend = backend_for_sync_engine(engine)
    if backend is None:
        dialect = engine.dialect
        raise LeaseValueError(
            "sql_lease.sync.SqlLeaseProvider needs a postgresql+psycopg or sqlite engine, "
            f"not {dialect.name}+{dialect.driver}"
        )
    return backend


def _dialect(backend: Backend) -> str:
    return backend.async_driver.partition("+")[0]
