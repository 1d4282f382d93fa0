"""sql_lease for threads: blocking, thread-safe providers with the async ones' contract.

    from sql_lease.sync import SqlLeaseProvider

    with SqlLeaseProvider.from_url("postgresql://app@db/app") as leases:
        with leases.hold("report:daily", "worker-1", 30_000) as lease:
            ...  # renewed by a background thread; lease.check() raises LeaseLost on loss

Same method names, arguments, results (`AcquireResult`, `Lease`), semantics and errors (the
`LeaseError` family) as `sql_lease.SqlLeaseProvider` and `sql_lease.InMemoryLeaseProvider`,
on the same statements. PostgreSQL needs the ``sync`` extra (psycopg 3 and psycopg-pool);
SQLite needs only the standard library.
"""

from .._core.contract import AcquireResult, Lease
from .._core.counting import AcquireAllResult
from ..errors import LeaseLost, LeaseNotAcquired
from ._hold import HeldLease, LeaseHook
from ._hold_keys import HeldLeases
from ._memory import InMemoryLeaseProvider
from ._provider import SqlLeaseProvider

__all__ = [
    "AcquireAllResult",
    "AcquireResult",
    "HeldLease",
    "HeldLeases",
    "InMemoryLeaseProvider",
    "Lease",
    "LeaseHook",
    "LeaseLost",
    "LeaseNotAcquired",
    "SqlLeaseProvider",
]
