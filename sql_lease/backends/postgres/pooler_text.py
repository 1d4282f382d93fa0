"""The statement texts of pooler mode, for the async (`psycopg_driver`) and sync (`sync`) paths.

Behind a transaction pooler each call is one simple-protocol query::

    SET LOCAL statement_timeout = N; SET LOCAL lock_timeout = N; SET LOCAL DateStyle = ISO;
    <statement>

(one implicit transaction: the settings are in force for the statement and end with it;
``DateStyle`` makes the text timestamps of its rows ISO whatever the session's is), the
statement being the call of its plpgsql function (migration 0005, `functions`) while the
database has them, else the catalogue's plain text.

A call of a function also sets ``SET LOCAL plan_cache_mode = force_generic_plan``: plpgsql
keeps each statement's plan per server session (the reason for the functions), but PostgreSQL's
plan cache re-plans a statement for every call ("custom plans") while the generic plan's
estimate is not cheaper than theirs, which is what it finds for the write batches over
``unnest`` of arrays of unknown length: each batch was planned anew, a third of its server CPU
(about 650 µs -> 460 µs per batch of 15 writes of three kinds measured on the server process,
the same as the direct provider's prepared statement). The generic plan of every hot statement
is the one a prepared statement would run (lookups by key, through the primary key). It ends
with the transaction, like the timeouts; PostgreSQL 12+. The calls are data of the provider's own
catalogue (`Catalogue.server_calls`), read through the getter it hands over (its catalogue
changes once, when the table's schema is found). `PoolerStatements` keeps, per client
encoding, each statement as a `psycopg_wire.Template`; a call of a missing function is answered
with ``undefined_function`` before anything runs, and `PoolerStatements.fall_back` then switches
every connection of the provider to the plain statements (logged once).

On Citus, the statements that have no function of 0005/0006 (``renew_many``, ``force_release``,
``want``, ``purge``) are refused as plain text on a distributed table ("functions used in UPDATE
queries on distributed tables must not be VOLATILE", ``feature_not_supported``, raised while
planning: nothing ran); `PoolerStatements.to_citus` then switches the provider to their calls of
migration 0008 (`Catalogue.distributed`), which run on the coordinator, and the statement goes
again. The one-key calls are 0006's names, which 0008 made Citus's delegated functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import psycopg

from ..._core.deadlines import server_millis
from ...catalogue import Catalogue
from .psycopg_values import PIN_OUTPUT
from .psycopg_wire import Template, template

__all__ = ["GENERIC_PLANS", "PoolerStatements"]

logger = logging.getLogger("sql_lease")
_CACHED: Final = 256  # statement texts converted and kept (the catalogue has a few dozen)
#: Before a function call: its statements run their generic plans (the module docstring).
GENERIC_PLANS: Final = "SET LOCAL plan_cache_mode = force_generic_plan; "


class PoolerStatements:
    """One provider's pooler-mode statement texts, shared by its connections."""

    __slots__ = ("_caches", "_catalogue", "citus", "functions", "prefix")

    def __init__(self, timeout: float, catalogue: Callable[[], Catalogue] | None) -> None:
        millis = server_millis(timeout)
        #: The server-side timeouts at `SERVER_SHARE` of ``timeout``, and the output settings our
        #: rows depend on (`psycopg_values.PIN_OUTPUT`), for this statement only.
        self.prefix: Final = (
            f"SET LOCAL statement_timeout = {millis}; SET LOCAL lock_timeout = {millis}; "
            + PIN_OUTPUT
        )
        #: True until a call finds the server functions missing.
        self.functions = True
        #: True once a plain statement was refused by Citus (`to_citus`).
        self.citus = False
        self._caches: dict[str, dict[str, Template]] = {}
        #: The provider's catalogue as it is now: its `Catalogue.server_calls` (None: no calls).
        self._catalogue = catalogue

    def call_for(self, sql: str) -> str | None:
        """The call of server functions that replaces statement ``sql``, or None."""
        if self._catalogue is None:
            return None
        cat = self._catalogue()
        found = cat.server_calls.get(sql)
        if found is not None:
            return found.call
        if self.citus and cat.distributed is not None:
            extra = cat.distributed.calls.get(sql)
            return None if extra is None else extra.call
        return None

    def to_citus(self, sql: str, error: psycopg.Error) -> bool:
        """After ``feature_not_supported`` for ``sql``: True when ``sql`` went plain and Citus
        has a call for it (nothing ran: send it again, as `template` now gives it)."""
        if self.citus or not isinstance(error, psycopg.errors.FeatureNotSupported):
            return False
        if self._catalogue is None or self.call_for(sql) is not None:
            return False
        calls = self._catalogue().distributed
        if calls is None or sql not in calls.calls:
            return False
        self.citus = True
        for cache in self._caches.values():
            cache.clear()
        logger.info(
            "sql_lease: pooler mode on Citus (%s): the statements without a function of"
            " migration 0006 go as calls of migration 0008's",
            error.diag.message_primary,
        )
        return True

    def cache(self, encoding: str) -> dict[str, Template]:
        """The templates for client ``encoding`` (a connection binds it once, and looks a
        statement up there before calling `template`)."""
        return self._caches.setdefault(encoding, {})

    def template(self, cache: dict[str, Template], sql: str, encoding: str) -> Template:
        """``sql``'s template, made and kept in ``cache``."""
        if len(cache) >= _CACHED:
            cache.clear()
        call = self.call_for(sql) if self.functions else None
        if call is None:
            found = cache[sql] = template(sql, self.prefix, encoding)
        else:
            found = cache[sql] = template(call, self.prefix + GENERIC_PLANS, encoding)
        return found

    def fall_back(self, sql: str, error: psycopg.Error) -> bool:
        """After ``undefined_function`` for ``sql``: True when ``sql`` went as a function call
        (nothing ran: send its plain text, which `template` now gives); from now on every
        statement goes plain."""
        if not isinstance(error, psycopg.errors.UndefinedFunction) or self.call_for(sql) is None:
            return False
        if self.functions:
            self.functions = False
            for cache in self._caches.values():  # each connection keeps its cache bound
                cache.clear()
            logger.warning(
                "sql_lease: the server functions of pooler mode are missing (%s): sending plain"
                " statements, each planned on every call; apply the migrations to this database"
                " (revision 0005) and restart to use them",
                error.diag.message_primary,
            )
        return True
