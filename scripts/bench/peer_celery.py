"""Celery 5.x on a Redis broker with no result backend: ``delay`` / ``group``, prefork workers.

Celery keeps no state once a task is acked, so the task increments a Redis
counter and "done" reads it (docs/explanation/benchmarks.md).
"""

from __future__ import annotations

import os

import redis
from celery import Celery, group
from common import BENCH_DIR, REDIS_DB, ROOT, Adapter, python, record_start, redis_url, spawn

BROKER_URL = redis_url(REDIS_DB["celery"])
DONE_KEY = "bench:done"

app = Celery("peer_celery", broker=BROKER_URL)
app.conf.task_ignore_result = True

_counter: redis.Redis | None = None


@app.task(name="noop")
def noop(n: int) -> int:
    global _counter
    record_start(n)
    if _counter is None:
        _counter = redis.Redis.from_url(BROKER_URL)
    _counter.incr(DONE_KEY)
    return n


class CeleryPeer(Adapter):
    name = "celery"

    def __init__(self) -> None:
        self.redis = redis.Redis.from_url(BROKER_URL)

    def reset(self) -> None:
        self.redis.flushdb()

    def enqueue(self, arg: int) -> None:
        noop.delay(arg)

    def enqueue_bulk(self, args: list[int]) -> None:
        group(noop.s(arg) for arg in args).apply_async()

    def start_workers(self, processes: int):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH_DIR), str(ROOT)])}
        command = [python(), "-m", "celery", "-A", "peer_celery", "worker", "-P", "prefork", f"-c{processes}"]
        flags = ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning"]
        return [spawn([*command, *flags], env, "celery")]

    def done(self) -> int:
        return int(self.redis.get(DONE_KEY) or 0)

    def close(self) -> None:
        self.redis.close()


ADAPTER = CeleryPeer
