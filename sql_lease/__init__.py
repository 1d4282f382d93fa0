"""sql_lease: distributed leases on the PostgreSQL you already run.

One owner per key across processes, with atomic acquire, owner-checked release and renew,
gap-free transfer and fencing tokens. Implements Mastra's `LeaseProvider` contract.
"""

from ._core.contract import AcquireResult, ForeignLease, Lease, LeaseProvider, is_lease_provider
from ._core.counting import AcquireAllResult
from ._exclusive import exclusive
from ._holding.held import HeldLease, LeaseHook
from ._holding.held_keys import HeldLeases
from ._memory import InMemoryLeaseProvider
from ._noop import NOOP_LEASE_PROVIDER, NoopLeaseProvider, lease_provider_or_noop
from ._sqlprovider.provider import SqlLeaseProvider
from .capabilities import Holder, Released, Renewal
from .coordinator import Coordinator
from .errors import (
    LeaseAlreadyHeld,
    LeaseClosedError,
    LeaseConnectionError,
    LeaseDatabaseError,
    LeaseError,
    LeaseForeignRowError,
    LeaseForkedError,
    LeaseLimitMismatchError,
    LeaseLost,
    LeaseNotAcquired,
    LeaseSchemaError,
    LeaseTimeoutError,
    LeaseTypeError,
    LeaseValueError,
)
from .keys import LONG_KEY_HEAD_BYTES, LONG_KEY_MARKER, map_long_key
from .observer import LeaseEvent, LeaseEventKind, LeaseObserver, StatementEvent
from .schema import lease_table

__version__ = "0.1.0"

__all__ = [
    "LONG_KEY_HEAD_BYTES",
    "LONG_KEY_MARKER",
    "NOOP_LEASE_PROVIDER",
    "AcquireAllResult",
    "AcquireResult",
    "Coordinator",
    "ForeignLease",
    "HeldLease",
    "HeldLeases",
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
    "LeaseForeignRowError",
    "LeaseForkedError",
    "LeaseHook",
    "LeaseLimitMismatchError",
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
    "map_long_key",
]
