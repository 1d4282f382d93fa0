"""MariaDB URLs as ``from_url`` takes them: checked and set to asyncmy (no driver import).

``mariadb://`` and ``mariadb+asyncmy://`` are taken. ``mysql://`` (any driver) is refused with
the reason: MySQL 8 has no ``RETURNING``, which every statement of this backend needs, and a
backend that half works on MySQL would be worse than none.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy.engine import URL

from ...errors import LeaseValueError

__all__ = ["ASYNC_DRIVER", "MYSQL_SCHEMES", "SCHEMES", "SYNC_DRIVER", "normalize_url"]

ASYNC_DRIVER: Final = "mariadb+asyncmy"
SYNC_DRIVER: Final = "mariadb+pymysql"
SCHEMES: Final = frozenset({"mariadb", ASYNC_DRIVER})
MYSQL_SCHEMES: Final = frozenset(
    {"mysql", "mysql+asyncmy", "mysql+aiomysql", "mysql+pymysql", "mysql+mysqldb"}
)
_ALLOWED_QUERY: Final = frozenset(
    {"charset", "ssl_ca", "ssl_cert", "ssl_key", "ssl_check_hostname"}
)

MYSQL_REFUSED: Final = (
    "a mysql:// URL is refused: MySQL is not supported, its statements have no RETURNING, "
    "which every statement of the MariaDB backend needs (one conditional statement per "
    "operation that reports the row it judged). For MariaDB 10.6 or later use mariadb://user:password@host:3306/database"
)


def normalize_url(parsed: URL) -> URL:
    """``parsed`` as ``mariadb+asyncmy``, with a database; a ``mysql`` URL is refused."""
    if parsed.drivername in MYSQL_SCHEMES or parsed.drivername.startswith("mysql"):
        raise LeaseValueError(MYSQL_REFUSED)
    if not parsed.database:
        raise LeaseValueError(
            "the MariaDB URL names no database: mariadb://user:password@host:3306/database"
        )
    unknown = sorted(set(parsed.query) - _ALLOWED_QUERY)
    if unknown:
        raise LeaseValueError(
            f"unknown MariaDB URL parameter(s) {', '.join(unknown)}: "
            f"use only {', '.join(sorted(_ALLOWED_QUERY))}"
        )
    return parsed.set(drivername=ASYNC_DRIVER)
