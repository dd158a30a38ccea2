"""History pages read a streaming replica of PostgreSQL, when one is configured; nothing else does.

A replica lags the primary (by milliseconds, or by much more while its replay
is held back), and a claim, a cancel or a retry decided on an old row would be
wrong. So reads go to the replica only while a view wrapped in ``reads_replica``
answers a GET: the admin's history lists, the dashboard, the API's job list and
/api/stats/. Only then does ``ReplicaRouter`` send reads of the queue's own
models there; a read inside a transaction on the primary still reads the
primary (it is part of a decision), and every write goes to the primary.
The users and permissions a view checks are never read from the replica.

A replica that does not answer does not take those pages down: each page asks it
first (one ``SELECT 1`` on a kept connection, or a new connection), and reads the
primary if it does not answer, with a warning logged. A replica lost in the middle
of a page's queries fails that page; the next one reads the primary.

Never call the engine inside ``reading_replica``: its reads outside a transaction
(the row ``cancel_job`` returns, say) would come from the replica. Only views that
show, and act on nothing, are wrapped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.template.response import TemplateResponse

from queue_app.observability.logs import get_logger

log = get_logger(__name__)

REPLICA_ALIAS = "replica"
ROUTED_APP = "queue_app"
SAFE_METHODS = frozenset({"GET", "HEAD"})

# The alias the queue's models are read from in this context; None: no opinion (the primary).
_reading: ContextVar[str | None] = ContextVar("queue_app_replica_reading", default=None)


class ReplicaRouter:
    """Reads of the queue's models go to the replica inside ``reading_replica`` only; writes never do."""

    def db_for_read(self, model, **hints):
        alias = _reading.get()
        if alias is None or model._meta.app_label != ROUTED_APP:
            return None
        if connections[DEFAULT_DB_ALIAS].in_atomic_block:
            return DEFAULT_DB_ALIAS  # a read in the primary's transaction belongs to what it decides
        return alias

    def db_for_write(self, model, **hints):
        # Explicit even for a row read from the replica: its instance would otherwise name the replica.
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints):
        # The replica holds the primary's rows: a row read from either may refer to one from the other.
        return True

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        # A standby replays the primary's schema and refuses writes of its own; other
        # databases of a host project are its other routers' to decide.
        return False if db == REPLICA_ALIAS else None


def replica_configured() -> bool:
    return REPLICA_ALIAS in connections.settings


def usable_replica() -> str:
    """The replica's alias if it answers, else the primary's (and a warning saying why)."""
    if not replica_configured():
        return DEFAULT_DB_ALIAS
    replica = connections[REPLICA_ALIAS]
    try:
        # A kept connection the server dropped (a restart, a failover) looks open until used.
        if replica.connection is not None and not replica.is_usable():
            replica.close()
        replica.ensure_connection()
    except DatabaseError as exc:
        log.warning("replica_unavailable_reading_primary", alias=REPLICA_ALIAS, error=str(exc).strip())
        return DEFAULT_DB_ALIAS
    return REPLICA_ALIAS


@contextmanager
def reading_replica() -> Iterator[str]:
    """Reads of the queue's models in the block go to the replica, or to the primary when it does not
    answer; yields the alias they read."""
    alias = usable_replica()
    token = _reading.set(alias)
    try:
        yield alias
    finally:
        _reading.reset(token)


def reads_replica(view: Callable) -> Callable:
    """A view whose GET and HEAD read the replica (``method_decorator(reads_replica)`` for a method);
    any other method reads the primary, as it may act. A template response is rendered inside, so
    the template's own queries (the date drill-down's) read the replica too."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if request.method not in SAFE_METHODS or not replica_configured():
            return view(request, *args, **kwargs)
        with reading_replica():
            response = view(request, *args, **kwargs)
            if isinstance(response, TemplateResponse) and not response.is_rendered:
                response.render()
            return response

    return wrapper
