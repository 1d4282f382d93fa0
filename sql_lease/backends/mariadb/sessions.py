"""The session settings of every connection the MariaDB backend runs statements on (async and
sync, an application's engine included), as one statement; no driver.

``sql_mode`` with ``SIMULTANEOUS_ASSIGNMENT`` (see `catalogue`), the UTC time zone (the
statements' clock, ``SYSDATE(6)``, follows it), ``max_statement_time`` and
``innodb_lock_wait_timeout`` at 80% of a call's timeout (the server ends a stuck statement,
saying nothing was applied, before the client's deadline; the lock wait timeout is whole
seconds, at least 1, so the statement time usually fires first), autocommit, and the session
variables of the counting statements set to a value of their type (`counting`).
"""

from __future__ import annotations

import math

from ..._core.deadlines import SERVER_SHARE
from .catalogue import SESSION_SQL_MODE
from .counting import COUNTING_VARIABLES

__all__ = ["session_sql"]


def session_sql(timeout: float) -> str:
    """The session settings of a connection whose calls are bounded by ``timeout`` seconds."""
    server = timeout * SERVER_SHARE
    return (
        f"SET SESSION sql_mode = '{SESSION_SQL_MODE}', time_zone = '+00:00', "
        f"max_statement_time = {server:.3f}, "
        f"innodb_lock_wait_timeout = {max(1, math.ceil(server))}, autocommit = 1, "
        + ", ".join(f"{name} = {value}" for name, value in COUNTING_VARIABLES)
    )
