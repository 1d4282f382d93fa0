"""The statement catalogue as plain data: what every executor runs, with no I/O and no driver.

A `Catalogue` holds one `Statement` per lease operation for one table on one backend. A
statement carries its SQL text exactly as sent, its parameter names in bind order, its result
column names and ``decode`` (one row -> a value). The async provider, the sync provider and
the TypeScript client (through ``sql-lease sql --json``) run these very texts.

Rows are sequences whose keys and owners are ``bytes`` and whose times are aware datetimes
(each backend's driver adaptor makes them so); the decoders below are shared by the backends
and by the sync provider. Stored names are UTF-8 (lone surrogates as WTF-8: decoded with
``surrogatepass``); bytes that are not, written by another tool, raise `LeaseForeignRowError`
on reads (`name_of`), and `decode_list_live` shows such a row as a `ForeignLease`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Generic, NamedTuple, TypeVar

from ._core.contract import ForeignLease, Lease
from ._core.counting import Grant, grants_of
from .capabilities import Holder, Released, Renewal
from .errors import LeaseForeignRowError

__all__ = [
    "WRITE_COLUMNS",
    "WRITE_KINDS",
    "AcquireRow",
    "AllRow",
    "Batch",
    "Batches",
    "Catalogue",
    "CountRow",
    "CountingStatements",
    "DistributedCall",
    "DistributedCalls",
    "LeaseRow",
    "LeaseState",
    "Row",
    "ServerCall",
    "Statement",
    "Transaction",
    "decode_acquire",
    "decode_all",
    "decode_count",
    "decode_count_released",
    "decode_force_release",
    "decode_holder",
    "decode_key",
    "decode_lease",
    "decode_lease_state",
    "decode_list_live",
    "decode_now",
    "decode_one",
    "decode_owner",
    "decode_released",
    "decode_renewal",
    "decode_renewed_pair",
    "decode_row",
    "label",
    "name_of",
]

T = TypeVar("T")
Row = Sequence[Any]


@dataclass(frozen=True, slots=True)
class Statement(Generic[T]):
    """One SQL statement: its text, parameters in bind order, result columns, row decoder."""

    name: str
    sql: str
    params: tuple[str, ...]
    columns: tuple[str, ...]
    decode: Callable[[Row], T]


class ServerCall(NamedTuple):
    """A statement sent as a call of server-side functions instead (PostgreSQL's pooler mode):
    the functions' unqualified names (one, but for a write batch of several kinds: the
    ``UNION ALL`` of theirs), the call's argument types, and its SQL text (``$n`` its
    arguments, in the statement's order)."""

    functions: tuple[str, ...]
    arguments: tuple[str, ...]
    call: str


class DistributedCall(NamedTuple):
    """A statement as Citus takes it: ``call`` (``$n``: its arguments; ``arrays`` go as text).
    Over many keys, ``worker_call`` takes one worker's share: an anchor key (``$1``), then the
    arguments at ``worker_args``; ``spread``: the parallel arrays (a key array first)."""

    call: str
    arrays: tuple[int, ...] = ()
    worker_call: str | None = None
    worker_args: tuple[int, ...] = ()
    spread: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class DistributedCalls:
    """A table's `DistributedCall`s by text, sent once it is found distributed (a text without
    one, such as a read over many keys or the clock, goes as it is)."""

    schema: str
    table: str
    calls: Mapping[str, DistributedCall]


class AcquireRow(NamedTuple):
    """A row of the acquire statement: won (``acquired``), or the live ``holder`` (bytes)."""

    acquired: bool
    fence: int
    expires_at: datetime
    holder: bytes | None


class LeaseRow(NamedTuple):
    """The live lease of a key as `get_lease` reads it (the key is the caller's)."""

    owner: str
    fence: int
    expires_at: datetime
    acquired_at: datetime


def name_of(raw: bytes, column: str = "owner", key: bytes | None = None) -> str:
    """A stored key or owner as text; `LeaseForeignRowError` (naming ``key``, or ``raw`` for
    a key) when it is not UTF-8."""
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise LeaseForeignRowError(raw if column == "key" else key, column, raw) from exc


def decode_row(statement: Statement[T], row: Row, key: bytes) -> T:
    """``statement.decode(row)`` for a call on ``key``: a foreign row's error names it (the
    row of a one-key read holds no key)."""
    try:
        return statement.decode(row)
    except LeaseForeignRowError as exc:
        raise exc.of_key(key) from exc.__cause__  # the UnicodeDecodeError


def decode_acquire(row: Row) -> AcquireRow:
    return AcquireRow(bool(row[0]), row[1], row[2], row[3])


def decode_owner(row: Row) -> str:
    return name_of(row[0])


def decode_holder(row: Row) -> Holder:
    return Holder(name_of(row[0]), row[1], row[2])


def decode_lease(row: Row) -> LeaseRow:
    return LeaseRow(name_of(row[0]), row[1], row[2], row[3])


def decode_released(row: Row) -> Released:
    return Released(row[0], row[1])


def decode_renewal(row: Row) -> Renewal:
    return Renewal(row[0], row[1])


def decode_renewed_pair(row: Row) -> tuple[tuple[bytes, bytes], Renewal]:
    return (row[0], row[1]), Renewal(row[2], row[3])


def decode_force_release(row: Row) -> Holder:
    """(previous owner, its fence, when it was ended). The row is already released: a
    foreign owner is shown as its `label` rather than raising after the write."""
    return Holder(label(bytes(row[0])), row[1], row[2])


def _text(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def label(raw: bytes) -> str:
    """A stored name for people: its text, or ``\\x`` and its hex when it is not UTF-8."""
    text = _text(raw)
    return "\\x" + raw.hex() if text is None else text


def decode_list_live(row: Row) -> Lease:
    """A live row; one whose key or owner is not UTF-8 as a `ForeignLease` (never raises)."""
    key, owner = bytes(row[0]), bytes(row[1])
    key_text, owner_text = _text(key), _text(owner)
    if key_text is not None and owner_text is not None:
        return Lease(key_text, owner_text, row[2], row[3], row[4])
    return ForeignLease(
        label(key) if key_text is None else key_text,
        label(owner) if owner_text is None else owner_text,
        row[2],
        row[3],
        row[4],
        key_bytes=key,
        owner_bytes=owner,
    )


class LeaseState(NamedTuple):
    """A row of the lease table as an operator sees it (``sql-lease top``): live, ended a
    little while ago, or wanted by a waiter. ``key`` and ``owner`` are their text, or their
    `label` when not UTF-8 (never raises); ``now`` is the database's clock when it was read."""

    key: str
    owner: str
    fence: int
    expires_at: datetime
    acquired_at: datetime
    wanted_until: datetime | None
    now: datetime

    @property
    def live(self) -> bool:
        return self.expires_at > self.now

    @property
    def wanted(self) -> bool:
        """A waiter marked the key wanted and has not given up yet."""
        return self.wanted_until is not None and self.wanted_until > self.now


def decode_lease_state(row: Row) -> LeaseState:
    return LeaseState(
        label(bytes(row[0])), label(bytes(row[1])), row[2], row[3], row[4], row[5], row[6]
    )


def decode_now(row: Row) -> datetime:
    value: datetime = row[0]
    return value


def decode_one(row: Row) -> int:
    return 1


class CountRow(NamedTuple):
    """A counting statement's row: the stored owner (`RESERVED_OWNER` for a counting row,
    else a plain lease's), the holders' limit (None: plain), the live grants of a counting
    row, and the row's fence and expiry (a plain lease's own)."""

    owner: bytes
    slot_limit: int | None
    grants: tuple[Grant, ...]
    fence: int
    expires_at: datetime


def decode_count(row: Row) -> CountRow:
    return CountRow(bytes(row[0]), row[1], grants_of(row[2]), row[3], row[4])


class AllRow(NamedTuple):
    """A row of an all-or-none acquire: the key, whether it was taken (None: it has no row
    yet), its fence and expiry when taken, the holder that blocked it."""

    key: bytes
    acquired: bool | None
    fence: int | None
    expires_at: datetime | None
    holder: bytes | None


def decode_all(row: Row) -> AllRow:
    return AllRow(bytes(row[0]), row[1], row[2], row[3], None if row[4] is None else bytes(row[4]))


def decode_key(row: Row) -> bytes:
    return bytes(row[0])


def decode_count_released(row: Row) -> Released:
    """When a counting release took effect (database time) and the released grant's fence."""
    return Released(row[1], row[0])


@dataclass(frozen=True, slots=True)
class CountingStatements:
    """The statements of counting leases, metadata and all-or-none calls (see
    `sql_lease._core.counting`). Each one-key statement returns `CountRow`s, except
    ``release`` (`Released`: the grant's fence, the time it took effect).

    ``acquire`` (key, owner, ttl_ms, limit, metadata, metadata_is_str): grant or renew a slot,
    or change nothing; ``holders`` (key): the live row as a `CountRow` (a plain lease as one
    grant); ``renew`` (key, owner, ttl_ms) and ``transfer`` (key, from_owner, to_owner, ttl_ms,
    metadata, metadata_is_str): one row when done; ``release`` (key, owner).
    ``acquire_all(n)`` (n sorted keys, owner, ttl_ms) and ``release_all(n)`` (keys, owner):
    the statements for ``n`` keys, whose key parameters ``keys_args(keys)`` binds (an array
    on PostgreSQL, one parameter per key on SQLite); `AllRow`s, nothing written unless every
    key was free or the owner's. ``ensure(n)`` (PostgreSQL): expired placeholder rows for keys
    that have none (``acquire_all`` reports them with ``acquired`` None: it can only lock
    rows that exist). ``blocker(n)`` (SQLite, whose write returns no row when it took
    nothing): the first key held by another owner, read after a refusal.
    """

    acquire: Statement[CountRow]
    holders: Statement[CountRow]
    release: Statement[Released]
    renew: Statement[CountRow]
    transfer: Statement[CountRow]
    acquire_all: Callable[[int], Statement[AllRow]]
    release_all: Callable[[int], Statement[bytes]]
    keys_args: Callable[[list[bytes]], tuple[object, ...]]
    ensure: Callable[[int], Statement[bytes]] | None = None
    blocker: Callable[[int], Statement[AllRow]] | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    """The multi-row form of a one-row statement, for coalesced calls.

    ``sql`` takes one array per parameter of the one-row statement, in the same order (the
    calls' arguments, column by column); each result row is the call's key followed by the
    columns the one-row statement returns (``columns``), so that a caller's rows are its
    key's rows without the key. ``lock_wait``: the statement takes one more parameter after
    the arrays, the longest wait for a row lock in milliseconds (an integer).
    """

    name: str
    sql: str
    params: tuple[str, ...]
    columns: tuple[str, ...]
    lock_wait: bool = False


#: The write kinds a write batch carries, in the order of their parameters.
WRITE_KINDS: Final = ("acquire", "renew", "release", "transfer")
#: The columns of a write batch's rows after the kind and the key (NULL where a kind has none).
WRITE_COLUMNS: Final = ("acquired", "fence", "expires_at", "holder", "notified")


@dataclass(frozen=True, slots=True)
class Batches:
    """The multi-row statements of a backend that has them (PostgreSQL).

    ``writes(kinds)``: one statement for the calls of ``kinds`` (a sorted tuple of
    `WRITE_KINDS` indexes), each kind's arrays in order, then the lock wait; each row is the
    call's kind, key and `WRITE_COLUMNS`. ``read`` serves get_owner, holder and get_lease (its
    columns start with theirs, in their order).
    """

    writes: Callable[[tuple[int, ...]], Batch]
    read: Batch


@dataclass(frozen=True, slots=True)
class Transaction:
    """How a backend without multi-row statements (SQLite) sends a batch of coalesced calls:
    its one-row statements between ``begin`` (``begin_write`` for writes: SQLite's
    ``BEGIN IMMEDIATE`` takes the write lock at once) and ``commit``, ``rollback`` on failure."""

    begin_write: str
    begin: str
    commit: str
    rollback: str
    #: True: a call that finds a statement of its kind in flight waits for the next batch
    #: (SQLite: its writers queue for the file anyway). False: it runs its own statement at once
    #: (MariaDB: separate statements run in parallel on their row locks, where a transaction of
    #: one-row statements would only serialise them); batches then form only with
    #: ``coalesce="always"``.
    waits: bool = True


@dataclass(frozen=True, slots=True)
class Catalogue:
    """Every statement for one table on one backend (``dialect``), built once.

    ``renew_many(n)`` is the statement for ``n`` pairs (at most ``max_batch``; PostgreSQL's is
    the same for every n) and ``renew_many_args`` binds the pairs and the TTL in its order.
    ``guard`` runs inside the caller's own transaction through SQLAlchemy, so it takes named
    parameters (``:key``, ``:fence``); every other statement takes positional ones.
    ``batches``: the multi-row statements for coalesced calls, or None (SQLite: coalesced calls
    run their one-row statements in one ``transaction`` instead, its statement texts).
    ``server_calls``: by statement text, the call of server-side functions a pooler mode sends
    instead (PostgreSQL's, once the table's schema is known; empty elsewhere): data of the
    catalogue, so each provider reads its own table's; ``distributed``, Citus's (or None).
    """

    dialect: str
    table: str
    channel: str
    acquire: Statement[AcquireRow]
    holder: Statement[Holder]
    get_owner: Statement[str]
    get_lease: Statement[LeaseRow]
    release: Statement[Released]
    renew: Statement[Renewal]
    transfer: Statement[Renewal]
    renew_many: Callable[[int], Statement[tuple[tuple[bytes, bytes], Renewal]]]
    renew_many_args: Callable[[list[tuple[bytes, bytes]], int], tuple[object, ...]]
    force_release: Statement[Holder]
    list_live: Statement[Lease]
    list_states: Statement[LeaseState]
    purge_batch: Statement[int]
    want: Statement[Holder]
    now: Statement[datetime]
    guard: Statement[int] | None
    max_batch: int
    batches: Batches | None = None
    transaction: Transaction | None = None
    counting: CountingStatements | None = None
    server_calls: Mapping[str, ServerCall] = field(default_factory=dict)
    distributed: DistributedCalls | None = None
