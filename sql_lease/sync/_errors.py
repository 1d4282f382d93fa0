"""Error translation for the sync provider: the backends' own classifiers (psycopg's and
sqlite3's exceptions are known only to `sql_lease.backends`); kept for the sync modules."""

from __future__ import annotations

from ..backends.postgres.errors import translate

__all__ = ["translate"]
