"""`SyncHome`: the sync provider finds its table's schema before its first statement, when it
was given none (`sql_lease._sqlprovider.schema_home`)."""

from __future__ import annotations

import threading

from .._sqlprovider.schema_home import home_of, renames
from ..backends import Backend, SyncExecutor
from ..catalogue import Catalogue

__all__ = ["SyncHome"]


class SyncHome:
    """The sync provider's base: `_renamed` gives the text to send for a catalogue text."""

    _exec: SyncExecutor
    _sql: Catalogue
    _table_name: str
    _timeout: float

    def _init_home(self, backend: Backend, schema: str | None) -> None:
        self._backend = backend
        #: None when the statements name their schema; else old -> new statement texts,
        #: empty until the table's schema is found.
        self._renames: dict[str, str] | None = (
            {} if schema is None and backend.has_schemas else None
        )
        self._home_lock = threading.Lock()

    def _catalogue_now(self) -> Catalogue:
        """The catalogue as it is now (the executor may read its data: pooler mode's calls)."""
        return self._sql

    def _renamed(self, sql: str, operation: str) -> str:
        """``sql`` as the catalogue names it once the table's schema is known (found now if
        it is not yet, as part of ``operation``: one statement, `Backend.home_sql`)."""
        renamed = self._renames
        if renamed is None:
            return sql
        if not renamed:
            with self._home_lock:
                if not renamed:
                    rows = self._exec.run(
                        operation,
                        False,
                        self._backend.home_sql or "",
                        (self._table_name,),
                        self._timeout,
                    )
                    home = home_of(rows, self._table_name, operation)
                    new = self._backend.catalogue(self._table_name, None, home)
                    old, self._sql = self._sql, new  # first: see `_catalogue_now`
                    renamed.update(renames(old, new))
        return renamed.get(sql, sql)
