"""Which text goes to a Citus coordinator for each catalogue statement (no server needed): the
call of its function when the table is distributed (migrations 0008 and 0010), the statement
otherwise; the calls are data of each provider's own catalogue (`Catalogue.distributed`), and a
statement over many keys goes as one call per worker."""

from __future__ import annotations

import asyncio
import itertools
import weakref

import pytest

from sql_lease.backends.postgres import citus
from sql_lease.backends.postgres.catalogue import build_catalogue
from sql_lease.backends.postgres.shards import ShardMap, hash_bytes
from sql_lease.catalogue import WRITE_KINDS

TABLE = ("public", "leases")


def _detected(*tables: tuple[str, str]) -> citus.Detected:
    found = citus.Detected()
    found.citus = True
    found.tables = frozenset(tables)
    return found


def _texts() -> dict[str, str]:
    cat = build_catalogue("leases", "public")
    texts = {
        name: getattr(cat, name).sql
        for name in (
            "acquire",
            "renew",
            "release",
            "transfer",
            "get_owner",
            "get_lease",
            "holder",
            "force_release",
            "want",
            "purge_batch",
        )
    }
    texts["renew_many"] = cat.renew_many(3).sql
    return texts


def test_a_distributed_table_s_statements_become_calls() -> None:
    cat = build_catalogue("leases", "public")
    detected = _detected(TABLE)
    functions = {"purge_batch": "purge"}
    arity = {"acquire": 3, "renew": 3, "release": 2, "transfer": 4, "force_release": 1}
    for name, sql in _texts().items():
        call = detected.call_for(cat, sql)
        function = functions.get(name, name)
        assert call.startswith(f'SELECT * FROM "public"."leases_{function}"($1'), (name, call)
        if name in arity:
            assert call.endswith(f"${arity[name]})"), call


def test_every_batch_goes_to_its_kinds_batch_functions() -> None:
    cat = build_catalogue("leases", "public")
    assert cat.batches is not None
    detected = _detected(TABLE)
    names = ("acquire", "renew", "release", "transfer")
    for size in range(1, len(WRITE_KINDS) + 1):
        for kinds in itertools.combinations(range(len(WRITE_KINDS)), size):
            call = detected.call_for(cat, cat.batches.writes(kinds).sql)
            called = [n for k, n in enumerate(names) if f'"leases_batch_{n}"(' in call]
            assert called == [names[k] for k in kinds], (kinds, call)
    assert '"leases_batch_read"($1::pg_catalog.text::pg_catalog.bytea[])' in detected.call_for(
        cat, cat.batches.read.sql
    )


async def test_array_arguments_go_as_their_text() -> None:
    """asyncpg never sees an array parameter on Citus (its catalogue lookup of an array type
    takes about a second there): arrays go as text, cast by the call."""
    cat = build_catalogue("leases", "public")
    sent: list[tuple[str, tuple[object, ...]]] = []

    async def fetch(sql: str, *args: object) -> list[object]:
        sent.append((sql, args))
        return []

    detected = _detected(TABLE)
    await detected.send(fetch, cat, cat.renew_many(2).sql, ([b"\x00k", b"j"], [b"o", b"p"], 5))
    call, args = sent[-1]
    assert "::pg_catalog.text::pg_catalog.bytea[]" in call
    assert args == ('{"\\\\x006b","\\\\x6a"}', '{"\\\\x6f","\\\\x70"}', 5)
    await detected.send(fetch, cat, cat.batches.writes((0,)).sql, ([b"k"], [b"o"], [30_000], 100))
    assert sent[-1][1] == ('{"\\\\x6b"}', '{"\\\\x6f"}', "{30000}", 100)
    await detected.send(fetch, cat, cat.acquire.sql, (b"k", b"o", 5))
    assert sent[-1] == ('SELECT * FROM "public"."leases_acquire"($1, $2, $3)', (b"k", b"o", 5))


def test_other_statements_and_tables_go_as_they_are() -> None:
    cat = build_catalogue("leases", "public")
    for detected in (_detected(), _detected(("public", "other")), _detected(("x", "leases"))):
        for sql in _texts().values():
            assert detected.call_for(cat, sql) == sql
    detected = _detected(TABLE)
    for sql in (cat.list_live.sql, cat.now.sql, cat.guard.sql):
        assert detected.call_for(cat, sql) == sql


def test_the_calls_are_data_of_each_table_s_catalogue() -> None:
    """Two providers on two tables in one process: each catalogue carries its own table's
    calls, and no process-wide table of statements exists to share."""
    a = build_catalogue("jobs", "app")
    b = build_catalogue("locks", "other")
    assert a.distributed is not None and b.distributed is not None
    assert (a.distributed.schema, a.distributed.table) == ("app", "jobs")
    assert (b.distributed.schema, b.distributed.table) == ("other", "locks")
    assert a.distributed.calls[a.acquire.sql].call.startswith('SELECT * FROM "app"."jobs_acquire"(')
    assert b.distributed.calls[b.acquire.sql].call.startswith(
        'SELECT * FROM "other"."locks_acquire"('
    )
    assert not set(a.distributed.calls) & set(b.distributed.calls)
    detected = _detected(("app", "jobs"), ("other", "locks"))
    assert detected.call_for(b, a.acquire.sql) == a.acquire.sql  # never another table's call
    assert '"app"."jobs_renew"' in detected.call_for(a, a.renew.sql)
    tables = [
        name
        for name, v in vars(citus).items()
        if not name.startswith("__") and isinstance(v, dict | weakref.WeakKeyDictionary)
    ]
    assert tables == ["_POOLS"]  # pools -> their provider's answer, not statements
    assert not hasattr(citus, "register")
    # A table whose schema is not known yet has no calls (its texts are never sent).
    assert build_catalogue("leases").distributed is None


def _keys_of(worker: int, shards: ShardMap, n: int) -> list[bytes]:
    found = []
    for i in range(10_000):
        key = f"key-{i}".encode()
        if shards.group_of(key) == worker:
            found.append(key)
            if len(found) == n:
                return found
    raise AssertionError("no keys")


#: Two workers (groups 1 and 2), four shards over the 32-bit hash range, alternating.
SHARDS = ShardMap(
    [
        (-(2**31), -(2**30) - 1, 1),
        (-(2**30), -1, 2),
        (0, 2**30 - 1, 1),
        (2**30, 2**31 - 1, 2),
    ]
)


def test_hash_bytes_is_postgresql_s() -> None:
    """Values PostgreSQL 15 gave for ``hashtext`` of these texts (the hash Citus takes of a
    bytea key with the same bytes); tests/citus checks it against Citus's own placement."""
    vectors = {
        b"": -1477818771,
        b"k": -153401555,
        b"lease-17": 469534915,
        b"a-much-longer-key-of-more-than-twelve-bytes": 1379308890,
        b"twelve bytes": 652846557,
        "\u00e9".encode(): -983094517,
    }
    assert {k: hash_bytes(k) for k in vectors} == vectors


def test_shard_map_finds_the_worker_of_a_key() -> None:
    for key in (b"a", b"b", b"lease-1", b"\x00\xff"):
        h = hash_bytes(key)
        expected = 1 if (h < -(2**30)) or (0 <= h < 2**30) else 2
        assert SHARDS.group_of(key) == expected
    assert ShardMap([(0, 10, 1)]).group_of(b"k") is None  # no shard covers its hash
    keys = [b"a", b"b", b"c", b"d", b"e", b"f"]
    groups = SHARDS.split(keys)
    assert sorted(i for g in groups for i in g) == list(range(len(keys)))
    for group in groups:
        assert len({SHARDS.group_of(keys[i]) for i in group}) == 1
    assert len(groups) == len({SHARDS.group_of(k) for k in keys})


async def test_a_write_batch_goes_as_one_call_per_worker() -> None:
    """Each worker's share of every kind's arrays, the anchor one of its keys; a kind absent
    from the batch is an empty array; every key goes exactly once, with its own arguments."""
    cat = build_catalogue("leases", "public")
    assert cat.batches is not None
    detected = _detected(TABLE)
    detected.shards = {TABLE: SHARDS}
    one, two = _keys_of(1, SHARDS, 3), _keys_of(2, SHARDS, 2)
    renew_keys = [one[0], two[0], one[1]]
    release_keys = [two[1], one[2]]
    sent: list[tuple[str, tuple[object, ...]]] = []

    async def fetch(sql: str, *args: object) -> list[object]:
        sent.append((sql, args))
        return [("row", sql)]

    args = (
        renew_keys,
        [b"o1", b"o2", b"o3"],
        [10, 20, 30],
        release_keys,
        [b"o4", b"o5"],
        100,
    )
    rows = await detected.send(fetch, cat, cat.batches.writes((1, 2)).sql, args)
    assert len(sent) == 2 == len(rows)
    shares = []
    for sql, sent_args in sent:
        assert sql.startswith('SELECT * FROM "public"."leases_worker_writes"($1, ')
        anchor, *arrays, wait = sent_args
        assert len(arrays) == 5 and wait == 100  # renew's three, release's two; the lock wait
        shares.append((anchor, arrays))
    for anchor, arrays in shares:
        worker = SHARDS.group_of(_bytes(anchor))
        keys = [*_unhex(arrays[0]), *_unhex(arrays[3])]
        assert _bytes(anchor) in keys
        assert {SHARDS.group_of(k) for k in keys} == {worker}
    by_worker = {SHARDS.group_of(_bytes(a)): arrays for a, arrays in shares}
    assert _unhex(by_worker[1][0]) == [one[0], one[1]]
    assert _unhex(by_worker[1][1]) == [b"o1", b"o3"] and by_worker[1][2] == "{10,30}"
    assert _unhex(by_worker[1][3]) == [one[2]] and _unhex(by_worker[1][4]) == [b"o5"]
    assert _unhex(by_worker[2][0]) == [two[0]] and by_worker[2][2] == "{20}"
    assert _unhex(by_worker[2][3]) == [two[1]]
    call = sent[0][0]
    assert call.count("'{}'") == 3 + 4  # acquire's and transfer's arrays: empty


async def test_renew_many_and_reads_split_by_worker_too() -> None:
    cat = build_catalogue("leases", "public")
    assert cat.batches is not None
    detected = _detected(TABLE)
    detected.shards = {TABLE: SHARDS}
    keys = _keys_of(1, SHARDS, 2) + _keys_of(2, SHARDS, 2)
    sent: list[tuple[str, tuple[object, ...]]] = []

    async def fetch(sql: str, *args: object) -> list[object]:
        sent.append((sql, args))
        return []

    await detected.send(fetch, cat, cat.renew_many(4).sql, (keys, [b"o"] * 4, 500))
    assert [s for s, _ in sent] == [sent[0][0]] * 2
    assert (
        '"leases_worker_renew_many"($1, $2::pg_catalog.text, $3::pg_catalog.text, $4)'
        in (sent[0][0])
    )
    assert sorted(k for _, a in sent for k in _unhex(a[1])) == sorted(keys)
    assert all(a[3] == 500 for _, a in sent)
    sent.clear()
    await detected.send(fetch, cat, cat.batches.read.sql, (keys,))
    assert len(sent) == 2 and all('"leases_worker_read"(' in s for s, _ in sent)
    # Without placements (not read yet): 0008's batch function, on the coordinator.
    detected.shards = {}
    sent.clear()
    await detected.send(fetch, cat, cat.renew_many(4).sql, (keys, [b"o"] * 4, 500))
    assert len(sent) == 1 and '"leases_renew_many"(' in sent[0][0]


def _bytes(value: object) -> bytes:
    assert isinstance(value, bytes)
    return value


def _unhex(text: object) -> list[bytes]:
    """The keys of an array's text as `citus` writes it ({"\\\\x6b",...})."""
    assert isinstance(text, str) and text[0] == "{" and text[-1] == "}"
    return [bytes.fromhex(item.strip('"')[3:]) for item in text[1:-1].split(",") if item]


def test_pooler_mode_switches_to_citus_calls_when_a_plain_statement_is_refused() -> None:
    """Pooler mode sends 0006's calls; a statement that has none goes plain until Citus
    refuses one (``feature_not_supported``, before anything ran), then as 0008's call."""
    import psycopg

    from sql_lease.backends.postgres.pooler_text import PoolerStatements

    cat = build_catalogue("leases", "public")
    statements = PoolerStatements(10.0, lambda: cat)
    many = cat.renew_many(2).sql
    assert statements.call_for(many) is None  # plain PostgreSQL: the plain statement
    assert statements.call_for(cat.acquire.sql) is not None  # 0006's function
    refused = psycopg.errors.FeatureNotSupported("must not be VOLATILE")
    assert not statements.to_citus(cat.acquire.sql, refused)  # it had a call already
    assert not statements.to_citus(many, psycopg.errors.UndefinedFunction("no"))
    assert not statements.fall_back(many, refused)  # not a missing function
    assert statements.to_citus(many, refused)
    call = statements.call_for(many)
    assert call is not None and '"public"."leases_renew_many"(' in call
    force = statements.call_for(cat.force_release.sql)
    assert force == 'SELECT * FROM "public"."leases_force_release"($1)'
    assert not statements.to_citus(many, refused)  # once


async def test_a_failure_after_a_worker_s_call_ran_is_never_sent_again() -> None:
    """A batch sent as two calls whose second fails (a deadlock, say) after the first ran and
    committed: `PartlyApplied`, an unknown outcome, never a conflict to run again (which would
    apply the first worker's calls twice); a failure of the first call is the statement's."""
    import asyncpg

    from sql_lease._core.failures import Failure
    from sql_lease.backends.postgres.errors import PartlyApplied, classify, translate

    cat = build_catalogue("leases", "public")
    assert cat.batches is not None
    detected = _detected(TABLE)
    detected.shards = {TABLE: SHARDS}
    keys = _keys_of(1, SHARDS, 1) + _keys_of(2, SHARDS, 1)
    calls = 0

    async def fetch(sql: str, *args: object) -> list[object]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise asyncpg.DeadlockDetectedError("deadlock detected")
        return []

    args = (keys, [b"o", b"o"], [10, 10], 100)
    with pytest.raises(PartlyApplied) as info:
        await detected.send(fetch, cat, cat.batches.writes((0,)).sql, args)
    cause = info.value.__cause__
    assert cause is not None and classify(cause) is Failure.CONFLICT  # alone: sent again
    assert classify(info.value) is Failure.UNKNOWN
    error = translate(info.value, operation="acquire_lease", where="db", sent=True, table="t")
    assert error.outcome_unknown
    calls = 1  # the first call fails: the statement's own error
    with pytest.raises(asyncpg.DeadlockDetectedError):
        await detected.send(fetch, cat, cat.batches.writes((0,)).sql, args)


async def test_a_batch_goes_as_one_statement_per_group_each_answering_its_own_callers() -> None:
    """The batch senders split a batch by `Backend.key_groups` (Citus: by worker): each group
    is a statement of its own (sent at once), its callers get its rows or its error, in the
    batch's order; one write per key per batch holds in every group (a subset of the batch)."""
    from types import SimpleNamespace

    from sql_lease._sqlprovider.batch_senders import CoalescedCalls
    from sql_lease._sqlprovider.coalescer import Waiter

    asked: list[list[bytes]] = []

    def key_groups(keys: list[bytes]) -> list[list[int]]:
        asked.append(keys)
        return SHARDS.split(keys)

    fake = SimpleNamespace(_key_groups=key_groups)
    one, two = _keys_of(1, SHARDS, 3), _keys_of(2, SHARDS, 2)
    keys = [one[0], two[0], one[1], two[1], one[2]]
    loop = asyncio.get_running_loop()
    batch = [Waiter(k, (k,), 0.0, loop.create_future()) for k in keys]
    sent: list[list[bytes]] = []

    async def send(part: list[Waiter], seconds: float) -> list[object]:
        sent.append([w.key for w in part])
        if SHARDS.group_of(part[0].key) == 2:
            return [ValueError(w.key) for w in part]  # this group's statement failed
        return [[(w.key,)] for w in part]

    grouped = CoalescedCalls._grouped(fake, send)  # type: ignore[arg-type]
    results = await grouped(batch, 5.0)
    assert sorted(map(sorted, sent)) == sorted([sorted(one), sorted(two)])
    for key, result in zip(keys, results, strict=True):
        if SHARDS.group_of(key) == 2:
            assert isinstance(result, ValueError) and result.args == (key,)
        else:
            assert result == [(key,)]
    sent.clear()
    assert await grouped(batch[:1], 5.0) == [[(keys[0],)]]  # one call: no grouping asked
    assert sent == [[keys[0]]]
    assert asked == [keys]
