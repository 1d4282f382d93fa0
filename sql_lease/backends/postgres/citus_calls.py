"""The calls a Citus coordinator takes instead of a table's statements: catalogue data, no I/O.

`distributed_calls` gives, for PostgreSQL's catalogue of one table, what `build_catalogue`
keeps as `Catalogue.distributed` (each provider reads its own catalogue's: no registry shared
by the process). By statement text:

- the one-key statements and 0006's batches: 0006's calls (`functions.server_calls`), whose
  functions migration 0008 replaced with Citus-safe ones (the one-key ones delegated to the
  key's worker);
- ``force_release``, ``want``, ``purge_batch`` and ``renew_many``: 0008's own functions;
- a write batch, the read batch and ``renew_many`` also take one worker's share in one
  delegated call (`DistributedCall.worker_call`: 0010's ``worker_writes``, ``worker_read`` and
  ``worker_renew_many``), which the provider sends once per worker (`shards`).

- the counting statements (migration 0009): 0011's functions, the one-key ones
  (`COUNTING_ONE_KEY`) delegated to the key's worker, the all-or-none ones
  (`COUNTING_SEVERAL_KEYS`: an array of keys) run on the coordinator as one distributed
  transaction.

An array argument goes as the text of the array, cast on the server: asyncpg looks an array
type up in the catalogue once per connection, a query that takes about a second in a Citus
database (its many catalogue relations), which a first renewal cannot wait for.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from ...catalogue import (
    WRITE_KINDS,
    Catalogue,
    CountingStatements,
    DistributedCall,
    DistributedCalls,
    Statement,
)
from .. import quote_ident
from .functions import server_calls

__all__ = ["COUNTING_ONE_KEY", "COUNTING_SEVERAL_KEYS", "distributed_calls"]

#: Catalogue statements with a function of migration 0008 only: attribute, function, arity.
_EXTRA: Final = (
    ("force_release", "force_release", 1),
    ("want", "want", 2),
    ("purge_batch", "purge", 2),
)
#: The one-key counting statements (`CountingStatements` attributes) and their arity; each
#: has 0011's function ``<table>_count_<attribute>``, distributed by its first argument.
COUNTING_ONE_KEY: Final = (
    ("acquire", 6),
    ("holders", 1),
    ("renew", 3),
    ("release", 2),
    ("transfer", 6),
)
#: The all-or-none statements and their arguments' types: 0011's coordinator functions.
COUNTING_SEVERAL_KEYS: Final = (
    ("acquire_all", ("bytea[]", "bytea", "bigint")),
    ("release_all", ("bytea[]", "bytea")),
    ("ensure", ("bytea[]",)),
)
#: The array types of the functions' arguments, as a cast names them.
_ARRAYS: Final = {"bytea[]": "pg_catalog.bytea[]", "bigint[]": "pg_catalog.int8[]"}
#: Each write kind's arrays in a write batch (`WRITE_KINDS` order), as 0010's
#: ``worker_writes`` takes them after its anchor.
_WRITE_ARRAYS: Final = (
    ("bytea[]", "bytea[]", "bigint[]"),
    ("bytea[]", "bytea[]", "bigint[]"),
    ("bytea[]", "bytea[]"),
    ("bytea[]", "bytea[]", "bytea[]", "bigint[]"),
)


def distributed_calls(cat: Catalogue, table_name: str, where: str) -> DistributedCalls:
    """The Citus calls of ``cat`` (PostgreSQL's catalogue of ``table_name`` in schema
    ``where``)."""
    if cat.batches is None:  # never for PostgreSQL's catalogue
        raise ValueError("a PostgreSQL catalogue has batches")
    batches = cat.batches

    def fn(suffix: str) -> str:
        return f"{quote_ident(where)}.{quote_ident(f'{table_name}_{suffix}')}"

    found: dict[str, DistributedCall] = {}
    for text, server in server_calls(cat, table_name, where).items():
        found[text] = _cast(server.call, server.arguments)
    for attr, suffix, arity in _EXTRA:
        found[getattr(cat, attr).sql] = DistributedCall(_call(fn(suffix), arity))
    many = ("bytea[]", "bytea[]", "bigint")
    renew_many = _cast(_call(fn("renew_many"), 3), many)
    found[cat.renew_many(1).sql] = renew_many._replace(
        worker_call=_worker(fn("worker_renew_many"), [("$2", "bytea[]"), ("$3", "bytea[]")], "$4"),
        worker_args=(0, 1, 2),
        spread=((0, 1),),
    )
    read = found[batches.read.sql]
    found[batches.read.sql] = read._replace(
        worker_call=_worker(fn("worker_read"), [("$2", "bytea[]")]),
        worker_args=(0,),
        spread=((0,),),
    )
    for mask in range(1, 1 << len(WRITE_KINDS)):
        kinds = tuple(k for k in range(len(WRITE_KINDS)) if mask >> k & 1)
        text = batches.writes(kinds).sql
        found[text] = _writes(found[text], fn("worker_writes"), kinds)
    if cat.counting is not None:
        found.update(_counting_calls(cat.counting, fn))
    return DistributedCalls(where, table_name, found)


def _counting_calls(
    counting: CountingStatements, fn: Callable[[str], str]
) -> dict[str, DistributedCall]:
    """The counting statements' texts and the calls of their functions of migration 0011."""
    found: dict[str, DistributedCall] = {}
    for attr, arity in COUNTING_ONE_KEY:
        statement: Statement[Any] = getattr(counting, attr)
        found[statement.sql] = DistributedCall(_call(fn(f"count_{attr}"), arity))
    several: dict[str, Callable[[int], Statement[Any]] | None] = {
        "acquire_all": counting.acquire_all,
        "release_all": counting.release_all,
        "ensure": counting.ensure,
    }
    for attr, types in COUNTING_SEVERAL_KEYS:
        make = several[attr]
        if make is None:  # never for PostgreSQL's counting statements
            raise ValueError(f"PostgreSQL's counting statements have {attr}")
        call = _cast(_call(fn(f"count_{attr}"), len(types)), types)
        found[make(1).sql] = call  # one text for any number of keys: an array
    return found


def _writes(call: DistributedCall, name: str, kinds: tuple[int, ...]) -> DistributedCall:
    """``call`` of a write batch of ``kinds`` with its worker call: its arrays in place, the
    other kinds' empty."""
    slots: list[tuple[str, str]] = []
    worker_args: list[int] = []
    spread: list[tuple[int, ...]] = []
    before = 0
    for kind, arrays in enumerate(_WRITE_ARRAYS):
        if kind not in kinds:
            slots.extend(("{}", t) for t in arrays)
            continue
        indexes = tuple(range(before, before + len(arrays)))
        spread.append(indexes)
        for index, t in zip(indexes, arrays, strict=True):
            worker_args.append(index)
            slots.append((f"${len(worker_args) + 1}", t))
        before += len(arrays)
    worker_args.append(before)  # the lock wait, after the arrays
    wait = f"${len(worker_args) + 1}"
    return call._replace(
        worker_call=_worker(name, slots, wait),
        worker_args=tuple(worker_args),
        spread=tuple(spread),
    )


def _worker(name: str, slots: list[tuple[str, str]], scalar: str | None = None) -> str:
    """``SELECT * FROM name($1, slots..., scalar)``: each slot (of its array type) a
    parameter or ``{}`` (an empty array), as text: 0010's functions take an array's text
    (Citus writes a delegated call's array cast from text as a cast from ``cstring``, which
    the worker refuses) and cast it themselves."""
    args = ["'{}'" if v == "{}" else f"{v}::pg_catalog.text" for v, _ in slots]
    if scalar is not None:
        args.append(scalar)
    return f"SELECT * FROM {name}($1, {', '.join(args)})"


def _cast(call: str, types: tuple[str, ...]) -> DistributedCall:
    arrays = tuple(n for n, t in enumerate(types) if t.endswith("[]"))

    def cast_of(match: re.Match[str]) -> str:
        n = int(match[1]) - 1
        return f"{match[0]}::pg_catalog.text::{_ARRAYS[types[n]]}" if n in arrays else match[0]

    return DistributedCall(re.sub(r"\$(\d+)", cast_of, call), arrays)


def _call(name: str, arity: int) -> str:
    return f"SELECT * FROM {name}({', '.join(f'${n}' for n in range(1, arity + 1))})"
