"""The migrating wing: running the library's Alembic migrations on one connection within bounds
(``runner``), keeping an application's own Alembic away from the library's tables
(``app_alembic``), and the names of the event tables revision 0003 adds (``event_names``)."""
