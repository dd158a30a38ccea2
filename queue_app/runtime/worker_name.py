"""One running worker per ``--name``: a session-level PostgreSQL advisory lock.

A worker's name is its identity in ``queue_app_jobs.worker_id``; a restarted worker
settles the jobs its name still holds, so two live workers with one name
would settle each other's running jobs. The supervisor holds the lock on a
dedicated connection (outside Django's pool, which is closed before every
fork) for as long as it runs; PostgreSQL releases it when that session ends,
even after a SIGKILL.

Behind PgBouncer in transaction mode (``DATABASE_PGBOUNCER``) a session-level lock would
stay on the pooled server connection after the worker is gone, and refuse its restart:
there the lock is a transaction-level one, taken in a transaction the connection keeps
open, which ties the server connection to it until the client goes (PgBouncer then drops
the server connection, and the lock with it). The open transaction has no transaction id
and no snapshot between statements, so it holds back no vacuum.
"""

from __future__ import annotations

import zlib

import psycopg
from django.db import connection

from queue_app.conf import project_setting
from queue_app.engine import sql
from queue_app.observability.logs import get_logger

log = get_logger(__name__)

# The first key of the two-key advisory lock: "these locks are worker names".
LOCK_CLASS = 0x6A0B


class WorkerNameInUse(Exception):
    """Another live worker already runs under this name."""


def lock_key(name: str) -> int:
    """The name as a signed 32-bit key (two names can share one, very rarely: the
    second is then refused, never allowed to run twice)."""
    key = zlib.crc32(name.encode())
    return key - 2**32 if key >= 2**31 else key


class WorkerNameLock:
    def __init__(self, name: str) -> None:
        self.name = name
        self._session: psycopg.Connection | None = None

    def acquire(self) -> None:
        """Take the lock, or raise WorkerNameInUse. Store errors propagate (caller retries)."""
        params = connection.get_connection_params()
        for key in ("cursor_factory", "context", "server_side_binding"):
            params.pop(key, None)
        # Behind PgBouncer the lock is a transaction's, which psycopg opens (autocommit off)
        # with the first statement and this session keeps open for as long as it lives.
        pgbouncer = project_setting("DATABASE_PGBOUNCER")
        session = psycopg.connect(**params, autocommit=not pgbouncer)
        query = "try_worker_name_xact_lock" if pgbouncer else "try_worker_name_lock"
        row = session.execute(
            sql.query(query), {"lock_class": LOCK_CLASS, "key": lock_key(self.name)}
        ).fetchone()
        if not row[0]:
            session.close()
            raise WorkerNameInUse(self.name)
        self._session = session

    def still_held(self) -> bool:
        """False when the session that held the lock is gone (a PostgreSQL restart):
        the caller takes it again with ``acquire``."""
        if self._session is None or self._session.closed:
            return False
        try:
            self._session.execute(sql.query("ping"))
            return True
        except (psycopg.Error, OSError):
            self._session.close()
            return False

    def fileno(self) -> int | None:
        """The session's socket, for a forked child to close."""
        if self._session is None or self._session.closed:
            return None
        return self._session.fileno()

    def release(self) -> None:
        if self._session is not None and not self._session.closed:
            self._session.close()
        self._session = None
