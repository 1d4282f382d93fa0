"""The sync provider on Citus: the async provider's calls (`citus`), sent through psycopg.

A plain statement of the catalogue is refused on a distributed lease table (Citus takes no
volatile function in an ``UPDATE`` of one), so the sync provider sends what the async one
sends: each statement as the call of its function (migrations 0008, 0010 and 0011, read from the
provider's own catalogue), a statement over many keys as one call per worker. Whether the
database is Citus is asked once per executor, on its first statement's connection; on plain
PostgreSQL every statement then goes as it is, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.pq import ExecStatus

from ...catalogue import Catalogue
from .citus import DETECT_SQL, DISTRIBUTED_SQL, SHARDS_SQL, Detected
from .errors import PartlyApplied

__all__ = ["SyncCitus"]


class SyncCitus:
    """One sync executor's view of Citus (`Detected`) and its provider's ``catalogue``."""

    __slots__ = ("_catalogue", "detected")

    def __init__(self, catalogue: Callable[[], Catalogue]) -> None:
        self._catalogue = catalogue
        self.detected = Detected()

    def run(self, cur: psycopg.RawCursor[Any], sql: str, args: tuple[object, ...]) -> list[Any]:
        """Run ``sql`` with ``args`` on ``cur`` as the database takes it; its rows."""
        detected = self.detected
        if detected.citus is None:
            detected.citus = _ask(cur, detected)
        if not detected.citus:
            return _rows(cur, sql, args)
        if detected.stale(args):
            detected.learn_shards(_fetch(cur, SHARDS_SQL))
        rows: list[Any] = []
        planned = detected.plan(self._catalogue(), sql, args)
        for n, (text, sent) in enumerate(planned):
            try:
                rows.extend(_rows(cur, text, sent))
            except Exception as exc:
                if n == 0:
                    raise
                raise PartlyApplied(n, len(planned)) from exc
        return rows


def _ask(cur: psycopg.RawCursor[Any], detected: Detected) -> bool:
    found = _fetch(cur, DETECT_SQL)
    if not found or not found[0][0]:
        return False
    detected.learn(_fetch(cur, DISTRIBUTED_SQL), _fetch(cur, SHARDS_SQL))
    return True


def _fetch(cur: psycopg.RawCursor[Any], sql: str) -> list[Any]:
    cur.execute(sql, prepare=False)
    return cur.fetchall()


def _rows(cur: psycopg.RawCursor[Any], sql: str, args: tuple[object, ...]) -> list[Any]:
    cur.execute(sql, args, prepare=False, binary=True)
    res = cur.pgresult
    if res is not None and (res.nfields or res.status == ExecStatus.TUPLES_OK):
        return cur.fetchall()
    return []
