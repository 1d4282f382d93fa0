"""The async contract suite (SPEC §3 and §4, extensions), case for case, on the sync providers.

The cases are imported from tests/contract and run against `AsyncView` (conftest): each call
goes to the sync provider in a worker thread. Each test runs its case on the three backends
(memory, PostgreSQL, SQLite) at once, each on its own provider and table: most of the suite's
time is the cases' waits for short leases to expire, and those waits now overlap. A failure
names its backend. Cases that need ``async with provider.hold`` or cancelling a call have sync
counterparts in test_hold.py and test_wait.py.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.contract import test_bad_input, test_extensions, test_semantics, test_wait

from .conftest import AsyncView

#: The imported cases: every row of SPEC §3, the extensions and waiting that need no task
#: cancelling, and bad input.
CASES: list[Callable[..., Any]] = [
    *(
        case
        for name, case in vars(test_semantics).items()
        if name.startswith("test_") and callable(case)
    ),
    test_extensions.test_force_release_ends_anyones_lease_and_logs_it,
    test_extensions.test_list_leases_shows_live_leases_by_prefix_in_key_order,
    test_extensions.test_list_leases_validates_its_limit,
    test_extensions.test_purge_expired_removes_only_long_expired_rows,
    test_extensions.test_renew_leases_accepts_any_iterable_of_pairs,
    test_extensions.test_renew_leases_answers_per_item_in_order,
    test_extensions.test_renew_leases_rejects_bad_items_before_any_change,
    test_wait.test_a_free_key_is_acquired_at_once,
    test_wait.test_a_waiter_gets_the_key_when_the_holder_expires,
    test_wait.test_the_timeout_returns_the_last_result_naming_the_holder,
    test_wait.test_wait_for_lease_validates_its_timeout,
]


def on_every_backend(
    case: Callable[..., Any],
    marks: list[Any] | None = None,
    backends: frozenset[str] | None = None,
) -> Callable[..., Any]:
    """A test running ``case`` on each sync provider concurrently (or on those of
    ``backends``), with the same fixtures and marks (parametrize: the same parameters), or
    with ``marks`` instead."""
    sig = inspect.signature(case)
    others = [p for name, p in sig.parameters.items() if name != "provider"]

    async def test(every_sync_provider: dict[str, Any], **kwargs: Any) -> None:
        # Enough threads that one backend's blocking calls never queue behind another's.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(64))

        async def one(backend: str, sync: Any) -> None:
            try:
                outcome = case(AsyncView(sync), **kwargs)
                if inspect.isawaitable(outcome):
                    await outcome
            except BaseException as exc:
                exc.add_note(f"(the {backend} sync provider)")
                raise

        outcomes = await asyncio.gather(
            *(
                one(b, p)
                for b, p in every_sync_provider.items()
                if backends is None or b in backends
            ),
            return_exceptions=True,
        )
        errors = [e for e in outcomes if isinstance(e, BaseException)]
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise BaseExceptionGroup(f"{case.__name__} failed on several backends", errors)

    first = inspect.Parameter("every_sync_provider", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    test.__signature__ = sig.replace(parameters=[first, *others])  # type: ignore[attr-defined]
    test.__name__ = test.__qualname__ = case.__name__
    test.__doc__ = case.__doc__
    test.pytestmark = list(getattr(case, "pytestmark", []) if marks is None else marks)  # type: ignore[attr-defined]
    return test


for _case in CASES:
    globals()[_case.__name__] = on_every_backend(_case)


# Every third case of the async suite's: each method and argument is covered (the checks are
# the shared `sql_lease._core.validate` ones, run before any I/O).
test_bad_argument_is_rejected_and_changes_nothing = on_every_backend(
    test_bad_input.test_bad_argument_is_rejected_and_changes_nothing,
    [pytest.mark.parametrize(("method", "param", "value", "exc"), test_bad_input.cases()[::3])],
)
