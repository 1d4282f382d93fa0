"""The holding wing: held leases (`hold`), waiting (`wait_for_lease`), one renewal loop and one
waiter hub per provider, lifecycle hooks and hand-offs. It speaks to providers only through the
contract and the capability protocols, so it imports no backend and works over any provider."""
