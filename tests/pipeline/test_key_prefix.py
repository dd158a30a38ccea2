"""JOBQUEUE['REDIS_KEY_PREFIX']: every key the queue names starts with it, so projects
sharing one Redis database never see each other's ids.

Keys are collected with Redis MONITOR, which also shows the commands a Lua script runs,
and ``COMMAND GETKEYS``, which tells Redis's own answer to which arguments are keys.
"""

from __future__ import annotations

import re
import threading

import pytest
import redis
from django.db import connection

from queue_app import broker
from queue_app.models import Job
from queue_app.runtime.reconciler import Reconciler
from queue_app.services import JobRequest, enqueue_jobs
from tests.helpers import relay_all, run_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

QUEUES = {"default": False, "bulk": True}
_ARGUMENT = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|.)")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b"}


def _unescape(argument: str) -> str:
    """An argument as MONITOR quotes it (Redis's sdscatrepr), back to its text."""

    def one(match: re.Match) -> str:
        code = match[1]
        return chr(int(code[1:], 16)) if code.startswith("x") else _ESCAPES.get(code, code)

    return _ESCAPE.sub(one, argument)


class KeysNamed:
    """Redis MONITOR on the test database: the commands sent to it, arguments kept apart."""

    marker = "key-prefix-test-end"

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.db = client.connection_pool.connection_kwargs["db"]
        self.commands: list[list[str]] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _read(self) -> None:
        with self.client.monitor() as monitor:
            self._ready.set()
            while True:
                line = monitor.connection.read_response()
                line = line.decode(errors="replace") if isinstance(line, bytes) else line
                head = re.match(r"[\d.]+ \[(\d+) [^\]]*\] ", line)
                if head is None or int(head[1]) != self.db:
                    continue
                command = [_unescape(argument) for argument in _ARGUMENT.findall(line[head.end() :])]
                if command[1:] == [self.marker]:
                    return
                self.commands.append(command)

    def stop(self) -> set[str]:
        """Every key the commands seen named."""
        self.client.echo(self.marker)
        self._thread.join(timeout=30)
        keys = set()
        for command in self.commands:
            try:
                keys.update(self.client.command_getkeys(*command))
            except redis.ResponseError:
                pass  # a command that names no key (FLUSHDB, SCRIPT LOAD, TIME, ...)
        return keys


def backdate_relay() -> None:
    """As if the relay had sent every row an hour ago: the reconciler's grace is over."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE queue_app_job_outbox SET dispatched_at = now() - interval '1 hour'")


def test_every_key_the_queue_names_carries_the_prefix(redis_client, queue_config):
    queue_config(QUEUES=QUEUES, REDIS_KEY_PREFIX="site-a:")
    keys = KeysNamed(redis_client)
    jobs = enqueue_jobs(
        [JobRequest(type="probe.run", queue=queue) for queue in ("default", "bulk") for _ in range(3)]
    )
    relay_all()
    backdate_relay()
    redis_client.flushdb()  # Redis lost: the reconciler puts every queued job back

    report = Reconciler().run_once()
    failing = enqueue_jobs([JobRequest(type="probe.fail")])  # retried twice, through the retry set
    run_worker(queues=("default", "bulk"))
    named = keys.stop()

    assert report.counts["restored_ready"] == 6
    statuses = dict(Job.objects.values_list("id", "status"))
    assert [statuses[job.id] for job in jobs] == ["completed"] * 6
    assert statuses[failing[0].id] == "failed"
    assert {key for key in named if not key.startswith("site-a:queue:{")} == set()
    # The queue's structures were all in use, each under the prefix.
    kinds = {key.partition("}:")[2].partition(":")[0] for key in named}
    assert {"priority", "fifo", "retry", "inflight", "wake", "reconcile"} <= kinds
    assert {key.partition("}")[0] for key in named} == {"site-a:queue:{default", "site-a:queue:{bulk"}


def test_two_prefixes_on_one_database_do_not_see_each_others_ids(redis_client, queue_config):
    queue_config(QUEUES=QUEUES, REDIS_KEY_PREFIX="site-a:")
    (first,) = enqueue_jobs([JobRequest(type="probe.run")])
    relay_all()
    queue_config(REDIS_KEY_PREFIX="site-b:")
    (second,) = enqueue_jobs([JobRequest(type="probe.run")])
    relay_all()

    assert broker.reserve(redis_client, "default", False, 10) == [str(second.id)]
    assert broker.depths(redis_client, [("default", False)])["default"]["priority"] == 0
    queue_config(REDIS_KEY_PREFIX="site-a:")
    assert broker.depths(redis_client, [("default", False)])["default"]["priority"] == 1
    assert broker.reserve(redis_client, "default", False, 10) == [str(first.id)]


def test_no_prefix_keeps_the_documented_layout():
    assert broker.priority_key("mail") == "queue:{mail}:priority"
    assert broker.all_keys_pattern() == "queue:*"


def test_the_scan_pattern_matches_the_prefix_literally(queue_config):
    queue_config(REDIS_KEY_PREFIX="a*[b]?:")
    assert broker.priority_key("mail") == "a*[b]?:queue:{mail}:priority"
    assert broker.all_keys_pattern() == r"a\*\[b\]\?:queue:*"
