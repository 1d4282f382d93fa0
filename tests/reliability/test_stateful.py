"""Stateful property test: the SQL provider and the in-memory model, driven by the same steps.

Hypothesis builds random programs of acquire, get, renew, transfer and release calls on keys and
owners with NUL, accents, astral characters and maximal lengths, with TTLs that are either long or
short, and lets real time pass. Every call goes to both providers and the results must agree:
acquired and holder, booleans, owners, expiries, and fences up to renaming (the model counts from
1, the database draws from a sequence, but both must give a new, larger fence exactly when
ownership changes hands, and the same one otherwise).

Time: the SQL provider is judged by the database clock, so the model runs on that clock too. Its
clock is set, for each step, to a database instant inside the SQL call: the stamp a successful
write reports (so both store the same expiry), otherwise the database time read just before the
call. Only when a lease's expiry falls inside the call itself could the two judge differently;
then the model is put on the side of the expiry that the SQL result shows, and the test checks
that this instant really lies within the call. Renew and transfer go through the provider's
``_renew``/``_transfer`` (what ``renew_lease``/``transfer_lease`` wrap) to learn that stamp.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from sql_lease import InMemoryLeaseProvider, SqlLeaseProvider, migrate
from sql_lease._core.validate import MAX_TTL_MS

from ._strategies import names

T = TypeVar("T")
SHORT_MS = 40
TABLE = "stateful_leases"
#: How far outside a call's own window the model may be placed (µs of float rounding).
EPS = 2e-6

ttls = st.one_of(st.sampled_from([1, 5, SHORT_MS]), st.integers(60_000, MAX_TTL_MS))


class World:
    """The event loop and the SQL provider shared by every example."""

    runner: asyncio.Runner
    sql: SqlLeaseProvider
    steps = 0
    examples = 0
    straddled = 0  # calls during which a lease expired (judged by the side the result shows)


WORLD = World()


def run(aw: Awaitable[T]) -> T:
    return WORLD.runner.run(aw)  # type: ignore[arg-type]


class LeaseMachine(RuleBasedStateMachine):
    keys = Bundle("keys")
    owners = Bundle("owners")

    def __init__(self) -> None:
        super().__init__()
        self.sql = WORLD.sql
        run(self._truncate())
        self.base: datetime = run(self.sql.now())
        self.t = 0.0  # the model's clock: seconds of database time since `base`
        self.stamped: float | None = None  # the last SQL write's stamp, same units
        self.model = InMemoryLeaseProvider(clock=lambda: self.t)
        self.expiry: dict[str, float] = {}  # key -> the model's expiry of its current lease
        # key -> how far the model's expiry may be from SQL's: nonzero only after a write whose
        # call straddled the previous expiry (the model then stamped a moment before SQL did)
        self.drift: dict[str, float] = {}
        self.holder: dict[str, str] = {}  # key -> owner of its current lease (maybe expired)
        self.sql_fence: dict[str, int] = {}  # key -> SQL fence of its current lease
        self.fences: dict[int, int] = {}  # model fence -> SQL fence
        self.known: set[str] = set()
        WORLD.examples += 1

    async def _truncate(self) -> None:
        async with self.sql.engine.connect() as conn:
            await conn.exec_driver_sql(f"TRUNCATE {TABLE}")
            await conn.commit()

    # -- one step on both providers -------------------------------------------------------

    def rel(self, t: datetime) -> float:
        return (t - self.base) / timedelta(seconds=1)

    def step(
        self,
        key: str,
        sql_call: Callable[[], Awaitable[Any]],
        model_call: Callable[[], Awaitable[Any]],
        *,
        live: Callable[[Any], bool | None],
        stamp: Callable[[Any], datetime | None] = lambda _: None,
    ) -> tuple[Any, Any]:
        """Run ``sql_call``, place the model's clock inside it, run ``model_call``.

        ``live(sql_result)`` says whether the SQL statement found the key's lease live (None:
        the result does not tell, or does not depend on it).
        """
        WORLD.steps += 1
        self.known.add(key)
        d0 = self.rel(run(self.sql.now()))
        got = run(sql_call())
        d1 = self.rel(run(self.sql.now()))
        stamped = stamp(got)
        hi = d1 if stamped is None else self.rel(stamped)
        t = max(self.t, d0 if stamped is None else hi)
        side, exp = live(got), self.expiry.get(key)
        if side is not None and exp is not None and (t < exp) != side:
            # The lease expired during this very call: judge on the side SQL did.
            WORLD.straddled += 1
            t = max(self.t, exp - 1e-6) if side else exp
            slack = EPS + self.drift.get(key, 0.0)
            assert t < exp if side else t >= exp, ("model clock cannot follow", side, exp, t)
            assert d0 - slack <= t <= hi + slack, ("judged outside the call", d0, t, hi, got)
        self.t = t
        self.stamped = hi if stamped is not None else None
        want = run(model_call())
        return got, want

    def remember(self, key: str, owner: str, ttl: int) -> None:
        self.holder[key] = owner
        self.expiry[key] = self.t + ttl / 1000  # what the model stored (same arithmetic)
        self.drift[key] = abs(self.stamped - self.t) if self.stamped is not None else 0.0

    def same_fence(self, sql_fence: int | None, model_fence: int | None) -> None:
        assert (sql_fence is None) == (model_fence is None), (sql_fence, model_fence)
        if model_fence is None or sql_fence is None:
            return
        seen = self.fences.get(model_fence)
        if seen is None:
            assert all(sql_fence > f for f in self.fences.values()), (sql_fence, self.fences)
            self.fences[model_fence] = sql_fence
        else:
            assert seen == sql_fence, (model_fence, seen, sql_fence)

    def same_expiry(self, sql_expiry: datetime | None, key: str) -> None:
        assert sql_expiry is not None
        slack = 2 * EPS + self.drift.get(key, 0.0)
        assert abs(self.rel(sql_expiry) - self.expiry[key]) <= slack, (
            sql_expiry,
            self.expiry[key],
        )

    # -- rules --------------------------------------------------------------------------

    @initialize(target=keys)
    def nul_key(self) -> str:
        return "resource\0thread"

    @initialize(target=owners)
    def first_owner(self) -> str:
        return "run\0one"

    @rule(target=keys, key=names)
    def add_key(self, key: str) -> str:
        return key

    @rule(target=owners, owner=names)
    def add_owner(self, owner: str) -> str:
        return owner

    @rule(key=keys, owner=owners, ttl=ttls)
    def acquire(self, key: str, owner: str, ttl: int) -> None:
        before = self.sql_fence.get(key)
        got, want = self.step(
            key,
            lambda: self.sql.acquire_lease(key, owner, ttl),
            lambda: self.model.acquire_lease(key, owner, ttl),
            live=lambda r: (not r.acquired) or r.fence == before,
            stamp=lambda r: r.expires_at - timedelta(milliseconds=ttl) if r.acquired else None,
        )
        assert (got.acquired, got.owner) == (want.acquired, want.owner), (got, want)
        self.same_fence(got.fence, want.fence)
        assert isinstance(got.expires_at, datetime) and got.expires_at.tzinfo is not None
        if got.acquired:
            self.remember(key, owner, ttl)
            self.sql_fence[key] = got.fence
        self.same_expiry(got.expires_at, key)

    @rule(key=keys, owner=owners, ttl=ttls)
    def renew(self, key: str, owner: str, ttl: int) -> None:
        holder = self.holder.get(key)
        got, want = self.step(
            key,
            lambda: self.sql.renew(key, owner, ttl),
            lambda: self.model.renew_lease(key, owner, ttl),
            live=lambda r: True if r is not None else (False if holder == owner else None),
            stamp=lambda r: None if r is None else r[1] - timedelta(milliseconds=ttl),
        )
        assert (got is not None) is want, (got, want)
        if got is not None:
            assert got[0] == self.sql_fence[key]
            self.remember(key, owner, ttl)
            self.same_expiry(got[1], key)

    @rule(key=keys, a=owners, b=owners, ttl=ttls)
    def transfer(self, key: str, a: str, b: str, ttl: int) -> None:
        holder = self.holder.get(key)
        got, want = self.step(
            key,
            lambda: self.sql.transfer(key, a, b, ttl),
            lambda: self.model.transfer_lease(key, a, b, ttl),
            live=lambda r: True if r is not None else (False if holder == a else None),
            stamp=lambda r: None if r is None else r[1] - timedelta(milliseconds=ttl),
        )
        assert (got is not None) is want, (got, want)
        if got is not None:
            self.remember(key, b, ttl)
            self.same_expiry(got[1], key)
            assert (got[0] == self.sql_fence[key]) is (a == b), (got, self.sql_fence[key], a, b)
            self.sql_fence[key] = got[0]
            lease = run(self.model.get_lease(key))
            assert lease is not None
            self.same_fence(got[0], lease.fence)

    @rule(key=keys, owner=owners)
    def release(self, key: str, owner: str) -> None:
        got, want = self.step(
            key,
            lambda: self.sql.release_lease(key, owner),
            lambda: self.model.release_lease(key, owner),
            live=lambda _: None,  # released or already expired: free either way
        )
        assert got is None and want is None
        if self.holder.get(key) == owner:
            del self.holder[key]
            self.expiry.pop(key, None)

    @rule(key=keys)
    def get_owner(self, key: str) -> None:
        got, want = self.step(
            key,
            lambda: self.sql.get_lease_owner(key),
            lambda: self.model.get_lease_owner(key),
            live=lambda r: r is not None,
        )
        assert got == want, (got, want)

    @rule(key=keys)
    def get_lease(self, key: str) -> None:
        got, want = self.step(
            key,
            lambda: self.sql.get_lease(key),
            lambda: self.model.get_lease(key),
            live=lambda r: r is not None,
        )
        assert (got is None) == (want is None), (got, want)
        if got is not None and want is not None:
            assert (got.key, got.owner) == (want.key, want.owner) == (key, self.holder[key])
            self.same_fence(got.fence, want.fence)
            self.same_expiry(got.expires_at, key)
            assert got.acquired_at <= got.expires_at

    @rule(seconds=st.sampled_from([0.002, SHORT_MS / 1000]))
    def time_passes(self, seconds: float) -> None:
        time.sleep(seconds)

    @invariant()
    def holders_agree(self) -> None:
        for key in sorted(self.known)[:4]:
            self.get_owner(key)


async def _open(url: str) -> SqlLeaseProvider:
    return SqlLeaseProvider.from_url(url, table_name=TABLE, timeout=10, pool_size=2)


@pytest.fixture
def world(database_url: str) -> Iterator[World]:
    migrate.upgrade(database_url, table_name=TABLE)
    with asyncio.Runner() as runner:
        WORLD.runner = runner
        WORLD.sql = runner.run(_open(database_url))
        WORLD.steps = WORLD.examples = WORLD.straddled = 0
        try:
            yield WORLD
        finally:
            runner.run(WORLD.sql.aclose())


@pytest.mark.timeout(150)
def test_sql_provider_behaves_like_the_in_memory_model(world: World) -> None:
    LeaseMachine.TestCase.settings = settings(
        max_examples=80,
        stateful_step_count=40,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    started = time.monotonic()
    LeaseMachine.TestCase().runTest()
    print(
        f"stateful: {world.examples} programs, {world.steps} steps compared "
        f"({world.straddled} straddled an expiry) in {time.monotonic() - started:.1f}s"
    )
