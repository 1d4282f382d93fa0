"""Which text goes to a Citus coordinator for each catalogue statement (no server needed): the
call of its function when the table is distributed (migration 0008), the statement otherwise."""

from __future__ import annotations

import itertools

from sql_lease.backends.postgres import citus
from sql_lease.backends.postgres.catalogue import build_catalogue
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
    citus.register("leases", "public")
    detected = _detected(TABLE)
    functions = {"purge_batch": "purge"}
    arity = {"acquire": 3, "renew": 3, "release": 2, "transfer": 4, "force_release": 1}
    for name, sql in _texts().items():
        call = detected.call_for(sql)
        function = functions.get(name, name)
        assert call.startswith(f'SELECT * FROM "public"."leases_{function}"($1'), (name, call)
        if name in arity:
            assert call.endswith(f"${arity[name]})"), call


def test_every_batch_goes_to_its_kinds_batch_functions() -> None:
    citus.register("leases", "public")
    cat = build_catalogue("leases", "public")
    assert cat.batches is not None
    detected = _detected(TABLE)
    names = ("acquire", "renew", "release", "transfer")
    for size in range(1, len(WRITE_KINDS) + 1):
        for kinds in itertools.combinations(range(len(WRITE_KINDS)), size):
            call = detected.call_for(cat.batches.writes(kinds).sql)
            called = [n for k, n in enumerate(names) if f'"leases_batch_{n}"(' in call]
            assert called == [names[k] for k in kinds], (kinds, call)
    assert '"leases_batch_read"($1::pg_catalog.text::pg_catalog.bytea[])' in detected.call_for(
        cat.batches.read.sql
    )


async def test_array_arguments_go_as_their_text() -> None:
    """asyncpg never sees an array parameter on Citus (its catalogue lookup of an array type
    takes about a second there): arrays go as text, cast by the call."""
    citus.register("leases", "public")
    cat = build_catalogue("leases", "public")
    sent: list[tuple[str, tuple[object, ...]]] = []

    async def fetch(sql: str, *args: object) -> list[object]:
        sent.append((sql, args))
        return []

    detected = _detected(TABLE)
    await detected.send(fetch, cat.renew_many(2).sql, ([b"\x00k", b"j"], [b"o", b"p"], 5))
    call, args = sent[-1]
    assert "::pg_catalog.text::pg_catalog.bytea[]" in call
    assert args == ('{"\\\\x006b","\\\\x6a"}', '{"\\\\x6f","\\\\x70"}', 5)
    await detected.send(fetch, cat.batches.writes((0,)).sql, ([b"k"], [b"o"], [30_000], 100))
    assert sent[-1][1] == ('{"\\\\x6b"}', '{"\\\\x6f"}', "{30000}", 100)
    await detected.send(fetch, cat.acquire.sql, (b"k", b"o", 5))
    assert sent[-1] == ('SELECT * FROM "public"."leases_acquire"($1, $2, $3)', (b"k", b"o", 5))


def test_other_statements_and_tables_go_as_they_are() -> None:
    citus.register("leases", "public")
    cat = build_catalogue("leases", "public")
    for detected in (_detected(), _detected(("public", "other")), _detected(("x", "leases"))):
        for sql in _texts().values():
            assert detected.call_for(sql) == sql
    detected = _detected(TABLE)
    for sql in (cat.list_live.sql, cat.now.sql, cat.guard.sql):
        assert detected.call_for(sql) == sql
