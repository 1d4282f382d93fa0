"""sql_lease: distributed leases on the PostgreSQL you already run.

One owner per key across processes, with atomic acquire, owner-checked release and renew,
gap-free transfer and fencing tokens. Implements Mastra's `LeaseProvider` contract.
"""

from ._contract import AcquireResult, Lease, LeaseProvider, is_lease_provider
from ._exclusive import exclusive
from ._held import HeldLease, LeaseHook
from ._memory import InMemoryLeaseProvider
from ._noop import NOOP_LEASE_PROVIDER, NoopLeaseProvider, lease_provider_or_noop
from ._sql import SqlLeaseProvider
from .capabilities import Holder, Released, Renewal
from .coordinator import Coordinator
from .errors import (
    LeaseAlreadyHeld,
    LeaseClosedError,
    LeaseConnectionError,
    LeaseDatabaseError,
    LeaseError,
    LeaseForkedError,
    LeaseLost,
    LeaseNotAcquired,
    LeaseSchemaError,
    LeaseTimeoutError,
    LeaseTypeError,
    LeaseValueError,
)
from .observer import LeaseEvent, LeaseEventKind, LeaseObserver, StatementEvent
from .schema import lease_table

__version__ = "0.1.0"

__all__ = [
    "NOOP_LEASE_PROVIDER",
    "AcquireResult",
    "Coordinator",
    "HeldLease",
    "Holder",
    "InMemoryLeaseProvider",
    "Lease",
    "LeaseAlreadyHeld",
    "LeaseClosedError",
    "LeaseConnectionError",
    "LeaseDatabaseError",
    "LeaseError",
    "LeaseEvent",
    "LeaseEventKind",
    "LeaseForkedError",
    "LeaseHook",
    "LeaseLost",
    "LeaseNotAcquired",
    "LeaseObserver",
    "LeaseProvider",
    "LeaseSchemaError",
    "LeaseTimeoutError",
    "LeaseTypeError",
    "LeaseValueError",
    "NoopLeaseProvider",
    "Released",
    "Renewal",
    "SqlLeaseProvider",
    "StatementEvent",
    "__version__",
    "exclusive",
    "is_lease_provider",
    "lease_provider_or_noop",
    "lease_table",
]
