"""Pushing just-committed jobs to their ready sets without waiting for Redis's answer.

The enqueuer's commit makes a job real; the push only lets a worker start it
sooner. Waiting for Redis's reply would add a round trip to every enqueue, so
the command goes out on a connection of the calling thread's own and its reply
is read just before that connection's next command, long arrived by then. A push
that fails, or never arrives, costs time and not the job: the relay sends the
job's outbox row after RELAY_GRACE_SECONDS.

The push is an EVALSHA: each new connection loads the script as it connects, and
a NOSCRIPT answer (SCRIPT FLUSH on a live connection) has the next send load it
again, that one push left to the relay.

A Redis Cluster client pushes with ``ready.push_ready`` and waits (its commands
are routed by slot, node by node).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from queue_app.broker import scripts
from queue_app.broker.client import REDIS_ERRORS, is_cluster
from queue_app.broker.keys import priority_key, wake_key
from queue_app.broker.ready import PUSH_READY_SCRIPT, push_ready, push_ready_args
from queue_app.observability.logs import get_logger

log = get_logger(__name__)


class _Sender:
    """One thread's connection, and how many replies on it are still unread."""

    def __init__(self, client: Any) -> None:
        pool = client.connection_pool
        self.connection = pool.connection_class(**pool.connection_kwargs)
        self.client_id = id(client)
        self.pid = os.getpid()
        self.unread = 0
        # Redis answered NOSCRIPT on this connection: the next send loads the script first.
        self.script_lost = False
        self.connection.register_connect_callback(self._load_script)

    def _load_script(self, connection: Any) -> None:
        """On every (re)connect, before any push: the server may be new (a restart, a failover)."""
        connection.send_command("SCRIPT", "LOAD", PUSH_READY_SCRIPT)
        connection.read_response()
        self.script_lost = False

    def send(self, commands: list[tuple[Any, ...]]) -> None:
        self.read_replies()
        if not self._still_open():
            self.connection.disconnect()  # the next write connects again
        if self.script_lost and self.connection.is_connected:
            commands = [("SCRIPT", "LOAD", PUSH_READY_SCRIPT), *commands]
            self.script_lost = False
        packed = self.connection.pack_commands(commands)
        try:
            self.connection.send_packed_command(packed)
        except REDIS_ERRORS:
            # The connection may have died since its last use (Redis restarted): once more.
            self.connection.disconnect()
            self.connection.send_packed_command(packed)
        self.unread += len(commands)

    def _still_open(self) -> bool:
        """False when Redis has closed the connection (a restart, an idle timeout): a write
        to it would look sent and be lost. With every answer read, anything readable is
        the close."""
        if not self.connection.is_connected:
            return True
        try:
            return not self.connection.can_read(timeout=0)
        except REDIS_ERRORS:
            return False

    def read_replies(self) -> None:
        """Read what earlier commands answered; an error only means their jobs wait for the relay."""
        while self.unread:
            self.unread -= 1
            try:
                self.connection.read_response()
            except redis.exceptions.NoScriptError as exc:
                # SCRIPT FLUSH on this connection's server: this push waits for the relay.
                log.warning("dispatch_on_commit_failed", error=str(exc)[:300])
                self.script_lost = True
            except redis.ResponseError as exc:
                log.warning("dispatch_on_commit_failed", error=str(exc)[:300])
            except REDIS_ERRORS as exc:
                # The connection broke: whatever it still owed an answer for is unknown.
                log.warning("dispatch_on_commit_unconfirmed", count=self.unread + 1, error=str(exc)[:300])
                self.connection.disconnect()
                self.unread = 0


PUSH_READY_SHA = scripts.sha(PUSH_READY_SCRIPT)
_local = threading.local()


def _sender(client: Any) -> _Sender:
    sender = getattr(_local, "sender", None)
    if sender is None or sender.client_id != id(client) or sender.pid != os.getpid():
        # New, or a forked child's copy of its parent's (whose socket it must leave alone).
        sender = _local.sender = _Sender(client)
    return sender


def send_ready(client: Any, members_by_queue: Mapping[str, Sequence[tuple[float, str]]]) -> None:
    """Make just-created jobs ready, as (score, member) pairs per priority queue, and wake a
    worker on each queue; returns once the commands are written, not answered."""
    if is_cluster(client):
        for queue, members in members_by_queue.items():
            push_ready(client, queue, members)
        return
    commands = [
        ("EVALSHA", PUSH_READY_SHA, 2, priority_key(queue), wake_key(queue), *args)
        for queue, members in members_by_queue.items()
        for args in push_ready_args(members)
    ]
    _sender(client).send(commands)
