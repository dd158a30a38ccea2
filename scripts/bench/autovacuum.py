"""Autovacuum on for the long runs, as every production server has it.

A server tuned for fast test runs may turn autovacuum off; a soak, a backlog or a history
measured there would show the dead rows piling up that autovacuum would have removed, not the
queue's own cost. ``autovacuum_on()`` turns it on for the run (``ALTER SYSTEM`` and a reload,
which needs a superuser) and puts the server's own setting back after, saying both.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from common import server_url


def _set(conn, value: str | None) -> None:
    # value is 'on' or the setting read back from the server, never outside input.
    statement = "ALTER SYSTEM RESET autovacuum" if value is None else f"ALTER SYSTEM SET autovacuum = {value}"
    conn.execute(statement)
    conn.execute("SELECT pg_reload_conf()")


@contextmanager
def autovacuum_on() -> Iterator[str]:
    """Yields the setting the run had: 'on', or 'on (turned on for this run)'."""
    import psycopg

    with psycopg.connect(server_url("postgres"), autocommit=True) as conn:
        if conn.execute("SHOW autovacuum").fetchone()[0] == "on":
            yield "on"
            return
        # Any earlier ALTER SYSTEM value of the setting, to put back (None: the config files').
        earlier = conn.execute(
            "SELECT setting FROM pg_file_settings WHERE name = 'autovacuum'"
            " AND sourcefile LIKE '%%postgresql.auto.conf' AND applied"
        ).fetchone()
        print("autovacuum is off on this server: on for this run, put back after", file=sys.stderr)
        _set(conn, "on")
    try:
        yield "on (turned on for this run)"
    finally:
        with psycopg.connect(server_url("postgres"), autocommit=True) as conn:
            _set(conn, earlier[0] if earlier else None)
