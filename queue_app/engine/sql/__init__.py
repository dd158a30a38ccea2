"""Every hand-written SQL statement, named and kept in the ``.sql`` files beside this module.

Each file holds the statements of one concern; a statement starts with a
``-- name: <name>`` line and runs to the next one. Code runs them by name::

    cursor.execute(sql.query("claim_jobs"), params)

Values are always bound parameters; the statements are fixed text, never
built by formatting values or identifiers into them.

The database's functions (the claim's) are not statements: they are in
``schema/``, one file per version, loaded by migrations.

The hot path (enqueue, claim, complete, heartbeat) runs them on ``prepared()``
cursors, so PostgreSQL parses and plans each once per connection.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import psycopg
from django.db import connection

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.M)


@cache
def _queries() -> dict[str, str]:
    queries: dict[str, str] = {}
    for path in sorted(Path(__file__).parent.glob("*.sql")):
        parts = _NAME.split(path.read_text())
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise ValueError(f"SQL statement {name!r} is defined twice ({path.name})")
            # Without its comment lines: psycopg caches the conversion of a statement of
            # up to 4 KB only, and the claim's comments alone take it past that.
            queries[name] = "\n".join(
                line for line in body.strip().splitlines() if not line.lstrip().startswith("--")
            )
    return queries


def query(name: str) -> str:
    """The statement called ``name``; KeyError names it when there is none."""
    try:
        return _queries()[name]
    except KeyError:
        raise KeyError(f"no SQL statement named {name!r} in queue_app/engine/sql/") from None


@contextmanager
def prepared() -> Iterator[psycopg.Cursor]:
    """A cursor on Django's connection (and its transaction) whose statements run prepared.

    Django's own cursors bind on the client and never prepare (its default
    ``prepare_threshold`` is None, for connection poolers), so PostgreSQL parses
    and plans every statement again: for the claim, a CTE of a dozen parts, that
    took several milliseconds per call, more than running it. These cursors bind
    on the server and prepare each statement on its first run on a connection,
    unless the database's OPTIONS name a ``prepare_threshold`` themselves (None
    behind PgBouncer: never). Errors come out as Django's database exceptions,
    as from ``connection.cursor()``.
    """
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None and "prepare_threshold" not in connection.settings_dict["OPTIONS"]:
        # psycopg prepares nothing on a connection whose threshold is None. At 0 it prepares
        # a statement on its first run, on cursors that bind on the server: these, since
        # Django's own bind on the client and never prepare.
        raw.prepare_threshold = 0
    with connection.wrap_database_errors, _LoggedCursor(raw) as cursor:
        yield cursor


class _LoggedCursor(psycopg.Cursor):
    """Records its statements where Django records its own (DEBUG, or a test counting
    queries), so they count like any other query."""

    def execute(self, query, params=None, **kwargs):
        if not connection.queries_logged:
            return super().execute(query, params, **kwargs)
        started = time.monotonic()
        try:
            return super().execute(query, params, **kwargs)
        finally:
            connection.queries_log.append({"sql": query, "time": f"{time.monotonic() - started:.3f}"})


@contextmanager
def one_round_trip() -> Iterator[None]:
    """Statements executed on ``prepared()`` cursors inside go out together, as one transaction.

    In autocommit, the block is wrapped in an explicit BEGIN ... COMMIT sent in
    psycopg's pipeline mode: one network round trip in all, the commit's wait
    included (a Django transaction costs three: BEGIN, the statements, COMMIT).
    Inside a Django transaction, the statements share one round trip and the
    caller's commit follows. Results are read after the block.

    The hot path's statements look jobs up by primary key. In a transaction of its
    own the block turns sequential scans off: on a table of up to a few thousand
    jobs the planner takes a scan of every job for as cheap as a few index look-ups,
    and it is several times slower. (Inside a caller's transaction the setting
    would outlive the block, so it is left alone there.)
    """
    connection.ensure_connection()
    raw = connection.connection
    own_transaction = not connection.in_atomic_block
    with connection.wrap_database_errors:
        try:
            with raw.pipeline():
                if own_transaction:
                    raw.execute("BEGIN")
                    raw.execute("SET LOCAL enable_seqscan = off")
                yield
                if own_transaction:
                    raw.execute("COMMIT")
        except BaseException:
            if own_transaction and raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    raw.execute("ROLLBACK")
            raise


def dedicated_connection() -> psycopg.Connection:
    """An autocommit connection of its own, outside Django's pool, with Django's settings:
    for a LISTEN or a session-level lock that must outlive any one statement."""
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "server_side_binding"):
        params.pop(key, None)
    return psycopg.connect(**params, autocommit=True)
