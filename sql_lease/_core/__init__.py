"""The core wing: the contract and its values, argument checks, failure kinds, per-call deadlines
and the contention hint. No SQL dialect, no driver, no backend: every other wing builds on it."""
