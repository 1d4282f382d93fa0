"""Which database a command uses: ``--url``, ``SQL_LEASE_DATABASE_URL``, or the default."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..backends._urls import normalize_url, redact
from ..errors import LeaseValueError
from ..migrate import ENV_URL
from ._errors import CliError, ExitCode

__all__ = ["Target", "embedded_url", "resolve", "state_dir"]


@dataclass(frozen=True, slots=True)
class Target:
    """A resolved database: ``embedded`` ones are migrated automatically before use."""

    url: str
    embedded: bool = False
    note: str | None = None  #: shown on stderr when the database was not named by --url
    from_option: bool = False  #: named by --url (not the environment, not the default)

    @property
    def shown(self) -> str:
        """The URL with its password masked (`resolve` made sure it parses)."""
        try:
            return redact(normalize_url(self.url))
        except LeaseValueError:
            return "(invalid database URL)"

    @property
    def secrets(self) -> tuple[str, ...]:
        try:
            password = normalize_url(self.url).password
        except LeaseValueError:
            return ()
        return (str(password),) if password else ()


def state_dir() -> Path:
    """Where the embedded database of the commands lives (``$XDG_STATE_HOME/sql-lease``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sql-lease"


def embedded_url(path: Path) -> str:
    return f"sqlite:///{path}"


def resolve(url: str | None, *, embedded_path: Path | None = None) -> Target:
    """``url`` if given, else the environment, else the embedded SQLite default.

    The default applies only when neither is given at all: an empty ``--url`` or an empty
    variable (``--url "$DATABASE_URL"`` with the variable unset) is a usage error, never a
    silent switch to another database. ``embedded_path`` is the SQLite file to use by default
    (the demo passes a temporary one); it defaults to ``leases.db`` in `state_dir`. A URL
    that does not parse, or carries a parameter that is not supported, is a usage error here,
    before any command runs.
    """
    if url is not None:
        return _named(url, "--url")
    from_env = os.environ.get(ENV_URL)
    if from_env is not None:
        named = _named(from_env, ENV_URL)
        return Target(named.url, note=f"using {ENV_URL}: {named.shown}")
    path = embedded_path or state_dir() / "leases.db"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(
            f"cannot create {path.parent}: {exc.strerror}", ExitCode.UNREACHABLE
        ) from exc
    return Target(
        embedded_url(path),
        embedded=True,
        note=f"no --url or {ENV_URL}: using the embedded SQLite database at {path}",
    )


def _named(url: str, source: str) -> Target:
    if not url.strip():
        raise CliError(
            f"{source} is empty: give a database URL (without --url and {ENV_URL} the "
            "embedded SQLite database is used)",
            ExitCode.USAGE,
        )
    try:
        normalize_url(url)
    except LeaseValueError as exc:  # its message never quotes the URL
        raise CliError(f"{source}: {exc}", ExitCode.USAGE) from None
    return Target(url, from_option=source == "--url")
