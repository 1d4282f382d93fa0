"""The async contract suite (SPEC §3 and §4, extensions), case for case, on the sync providers.

The cases are imported from tests/contract and run against `AsyncView` (conftest): each call
goes to the sync provider in a worker thread. Cases that need ``async with provider.hold`` or
cancelling a call have sync counterparts in test_hold.py and test_wait.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract import test_bad_input
from tests.contract.test_bad_input import cases
from tests.contract.test_extensions import (
    test_force_release_ends_anyones_lease_and_logs_it,
    test_list_leases_shows_live_leases_by_prefix_in_key_order,
    test_list_leases_validates_its_limit,
    test_purge_expired_removes_only_long_expired_rows,
    test_renew_leases_accepts_any_iterable_of_pairs,
    test_renew_leases_answers_per_item_in_order,
    test_renew_leases_rejects_bad_items_before_any_change,
)
from tests.contract.test_semantics import *  # noqa: F403 - every row of SPEC §3
from tests.contract.test_wait import (
    test_a_free_key_is_acquired_at_once,
    test_a_waiter_gets_the_key_when_the_holder_expires,
    test_the_timeout_returns_the_last_result_naming_the_holder,
    test_wait_for_lease_validates_its_timeout,
)

__all__ = [
    "test_a_free_key_is_acquired_at_once",
    "test_a_waiter_gets_the_key_when_the_holder_expires",
    "test_force_release_ends_anyones_lease_and_logs_it",
    "test_list_leases_shows_live_leases_by_prefix_in_key_order",
    "test_list_leases_validates_its_limit",
    "test_purge_expired_removes_only_long_expired_rows",
    "test_renew_leases_accepts_any_iterable_of_pairs",
    "test_renew_leases_answers_per_item_in_order",
    "test_renew_leases_rejects_bad_items_before_any_change",
    "test_the_timeout_returns_the_last_result_naming_the_holder",
    "test_wait_for_lease_validates_its_timeout",
]


@pytest.mark.parametrize(("method", "param", "value", "exc"), cases()[::3])
async def test_bad_argument_is_rejected_and_changes_nothing(
    provider: Any, method: str, param: str, value: object, exc: type[Exception]
) -> None:
    """Every third case of the async suite's (each method and argument is covered; the checks
    are the shared `sql_lease._validate` ones, run before any I/O)."""
    await test_bad_input.test_bad_argument_is_rejected_and_changes_nothing(
        provider, method, param, value, exc
    )
