"""Where the sync providers get their SQL: the same statement catalogues as the async ones.

The only module of `sql_lease.sync` that knows where the catalogues live, so that moving them
(behind a backend seam) changes this file alone. No SQL text is written in `sql_lease.sync`.
"""

from __future__ import annotations

from .._guard import guard_statement
from .._sqlite import build_sqlite_statements
from .._statements import Statements, build_statements

__all__ = ["Statements", "build_sqlite_statements", "build_statements", "guard_statement"]
