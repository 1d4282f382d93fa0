"""The statement catalogues as plain data: checked without a database."""

from __future__ import annotations

import re
from dataclasses import fields
from datetime import UTC, datetime

import pytest

from sql_lease import Lease
from sql_lease.backends import backend_named
from sql_lease.capabilities import Holder, Released, Renewal
from sql_lease.catalogue import (
    WRITE_COLUMNS,
    WRITE_KINDS,
    AcquireRow,
    Catalogue,
    LeaseRow,
    Statement,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 0, 0, 15, tzinfo=UTC)


def _catalogues() -> list[Catalogue]:
    return [
        backend_named("postgres").catalogue("leases", "coord"),
        backend_named("sqlite").catalogue("leases", None),
    ]


def _statements(c: Catalogue) -> list[Statement[object]]:
    found = [getattr(c, f.name) for f in fields(c)]
    return [s for s in found if isinstance(s, Statement)] + [c.renew_many(1), c.renew_many(3)]


def _placeholders(sql: str) -> set[int]:
    return {int(n) for n in re.findall(r"[$?](\d+)", sql)}


@pytest.mark.parametrize("catalogue", _catalogues(), ids=lambda c: c.dialect)
def test_every_statement_binds_exactly_its_named_parameters(catalogue: Catalogue) -> None:
    for statement in _statements(catalogue):
        if statement.name == "guard":  # run through SQLAlchemy, with named parameters
            assert all(f":{p}" in statement.sql for p in statement.params)
            continue
        assert _placeholders(statement.sql) == set(range(1, len(statement.params) + 1)), (
            statement.name
        )
        assert len(set(statement.params)) == len(statement.params), statement.name


def test_both_backends_answer_the_same_operations_with_the_same_columns() -> None:
    pg, lite = _catalogues()
    pg_statements = [s for s in _statements(pg) if s.name != "guard"]
    for pg_statement, lite_statement in zip(pg_statements, _statements(lite), strict=True):
        assert pg_statement.name == lite_statement.name
        shared = [c for c in pg_statement.columns if c != "notified"]  # PostgreSQL only
        if pg_statement.name not in ("now", "purge_batch"):
            assert list(lite_statement.columns) == shared, pg_statement.name
    assert pg.guard is not None and pg.guard.sql.endswith("FOR SHARE")
    assert lite.guard is None  # SQLite cannot lock a row FOR SHARE


@pytest.mark.parametrize("catalogue", _catalogues(), ids=lambda c: c.dialect)
def test_rows_decode_to_the_results_the_provider_returns(catalogue: Catalogue) -> None:
    c = catalogue
    assert c.acquire.decode((True, 7, T1, None)) == AcquireRow(True, 7, T1, None)
    assert c.holder.decode((b"me", 7, T1)) == Holder("me", 7, T1)
    assert c.get_owner.decode((b"\xc3\xa9",)) == "é"
    assert c.get_lease.decode((b"me", 7, T1, T0)) == LeaseRow("me", 7, T1, T0)
    assert c.release.decode((7, T0, True)) == Released(7, T0)
    assert c.renew.decode((7, T1)) == Renewal(7, T1)
    assert c.transfer.decode((8, T1, False)) == Renewal(8, T1)
    assert c.renew_many(2).decode((b"k", b"me", 7, T1)) == ((b"k", b"me"), Renewal(7, T1))
    assert c.force_release.decode((b"me", 7, T0, False)) == Holder("me", 7, T0)
    assert c.list_live.decode((b"k", b"me", 7, T1, T0, T0)) == Lease("k", "me", 7, T1, T0)
    assert c.want.decode((b"me", 7, T1)) == Holder("me", 7, T1)
    assert c.now.decode((T0,)) == T0


def test_renew_many_binds_its_pairs_in_the_statements_order() -> None:
    pg, lite = _catalogues()
    pairs = [(b"a", b"x"), (b"b", b"y")]
    assert pg.renew_many_args(pairs, 500) == ([b"a", b"b"], [b"x", b"y"], 500)
    assert lite.renew_many_args(pairs, 500) == (500, b"a", b"x", b"b", b"y")
    assert len(lite.renew_many(2).params) == len(lite.renew_many_args(pairs, 500))
    assert pg.renew_many(1) is pg.renew_many(50_000)  # one text for every batch size
    assert lite.max_batch * 2 + 1 < 32_766  # SQLite's limit of bound values


def test_every_write_batch_binds_its_parameters_and_answers_each_kinds_columns() -> None:
    """One statement per sorted set of write kinds: its placeholders are its parameters, and
    each kind's one-row columns are among the batch's (the provider picks them by name)."""
    pg = _catalogues()[0]
    assert pg.batches is not None
    one_row = (pg.acquire, pg.renew, pg.release, pg.transfer)
    subsets = [
        tuple(k for k in range(len(WRITE_KINDS)) if mask >> k & 1)
        for mask in range(1, 1 << len(WRITE_KINDS))
    ]
    for kinds in subsets:
        batch = pg.batches.writes(kinds)
        assert batch.lock_wait and batch.params[-1] == "lock_wait_ms"
        assert _placeholders(batch.sql) == set(range(1, len(batch.params) + 1)), kinds
        assert len(set(batch.params)) == len(batch.params), kinds
        assert batch.columns == ("kind", "key", *WRITE_COLUMNS)
        for kind in kinds:
            assert set(one_row[kind].columns) <= set(WRITE_COLUMNS), kind
            assert f"{WRITE_KINDS[kind]}_keys" in batch.params
        assert pg.batches.writes(kinds) is batch  # built once
    for bad in [(), (1, 0), (0, 0), (4,)]:
        with pytest.raises(ValueError, match="not a sorted subset"):
            pg.batches.writes(bad)
