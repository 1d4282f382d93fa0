"""Every statement the PostgreSQL provider sends names every object in full (issue 24).

Checked on the texts, with no database (the hostile suite, `tests/hostile`, checks the effect):
every function call is ``pg_catalog.<name>(`` or grammar (``EXISTS``, ``ANY``, ``GREATEST``,
``LEAST``, ``EXTRACT``, ``ROWS FROM``), every operator is ``OPERATOR(pg_catalog.<op>)`` (the
``=`` of an ``UPDATE ... SET`` list is grammar), every cast is to a keyword type or a
``pg_catalog`` one, and the table and sequence always carry their schema. Also: a catalogue
whose table has no schema yet registers no pooler-mode call (its texts are never sent).
"""

from __future__ import annotations

import re
from dataclasses import fields

import pytest

from sql_lease.backends.postgres.catalogue import HOME_SQL, build_catalogue
from sql_lease.catalogue import WRITE_KINDS, Catalogue, Statement

GRAMMAR_CALLS = {"EXISTS", "ANY", "GREATEST", "LEAST", "EXTRACT", "FROM"}
KEYWORD_TYPES = {"bigint", "int", "boolean", "interval", "double", "numeric", "bit"}


def _texts(cat: Catalogue) -> dict[str, str]:
    found = {f.name: s.sql for f in fields(cat) if isinstance(s := getattr(cat, f.name), Statement)}
    found["renew_many"] = cat.renew_many(2).sql
    assert cat.batches is not None
    for mask in range(1, 1 << len(WRITE_KINDS)):
        kinds = tuple(k for k in range(len(WRITE_KINDS)) if mask >> k & 1)
        found[f"batch{kinds}"] = cat.batches.writes(kinds).sql
    found["batch_read"] = cat.batches.read.sql
    found["home"] = HOME_SQL
    return found


CATALOGUES = [build_catalogue("leases", None, "public"), build_catalogue("jobs", "tenant")]
TEXTS = [(name, sql) for cat in CATALOGUES for name, sql in _texts(cat).items()]


def _code(sql: str) -> str:
    """``sql`` without its string literals."""
    return re.sub(r"'(?:[^']|'')*'", "''", sql)


@pytest.mark.parametrize(("name", "sql"), TEXTS, ids=[f"{i}-{n}" for i, (n, _) in enumerate(TEXTS)])
def test_every_function_operator_and_type_is_named_in_full(name: str, sql: str) -> None:
    code = re.sub(r"OPERATOR\(pg_catalog\.[^)]+\)", "OP", _code(sql))
    for match in re.finditer(r"(\S*?)(\w+)\(", code):
        qualifier, called = match.groups()
        assert (
            qualifier.endswith("pg_catalog.")
            or called.upper() in GRAMMAR_CALLS
            or (
                called in ("u", "i", "p") and qualifier == ""  # column lists of aliases
            )
        ), (name, match.group(0))
    bare = re.sub(r"(?m)(\bSET\s+|^\s*|,\s*)\w+ = ", r"\1", code)  # UPDATE ... SET targets
    bare = bare.replace("SELECT *", "SELECT").replace("::", " ")
    leftover = re.findall(r"[-=<>+*/|&!~^%]+", bare.replace("%I", ""))
    assert leftover == [], (name, leftover)
    for cast in re.findall(r"::([\w.]+)", code):
        assert cast.startswith("pg_catalog.") or cast in KEYWORD_TYPES, (name, cast)


@pytest.mark.parametrize(("name", "sql"), TEXTS, ids=[f"{i}-{n}" for i, (n, _) in enumerate(TEXTS)])
def test_the_table_and_sequence_always_carry_their_schema(name: str, sql: str) -> None:
    for before, _ in re.findall(r'(\S*?)"(leases|jobs)(?:_fence_seq)?"', sql):
        assert before.endswith(('"public".', '"tenant".')), (name, before)


def test_a_catalogue_without_its_schema_has_no_pooler_call() -> None:
    assert build_catalogue("unhomed", None).server_calls == {}
    found = build_catalogue("unhomed", None, "somewhere")
    call = found.server_calls[found.acquire.sql]
    assert call.call == 'SELECT * FROM "somewhere"."unhomed_acquire"($1, $2, $3)'
    assert call.functions == ("unhomed_acquire",)
    # Another table's catalogue holds its own calls, not these (no process-wide registry).
    assert found.acquire.sql not in build_catalogue("other", None, "somewhere").server_calls


def test_every_batch_of_a_catalogue_has_its_call() -> None:
    found = build_catalogue("jobs", "tenant")
    assert found.batches is not None
    for mask in range(1, 16):
        kinds = tuple(k for k in range(4) if mask >> k & 1)
        call = found.server_calls[found.batches.writes(kinds).sql]
        assert len(call.functions) == len(kinds)
        assert call.call.count("UNION ALL") == len(kinds) - 1
    assert found.server_calls[found.batches.read.sql].functions == ("jobs_batch_read",)
