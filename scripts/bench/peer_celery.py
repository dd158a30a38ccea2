"""Celery 5.x on a Redis broker with no result backend: ``delay`` / ``group``, prefork workers.

Celery keeps no state once a task is acked, so the task increments a Redis
counter and "done" reads it (docs/explanation/benchmarks.md).

Workflows need results: a chord's callback waits on a counter in the result backend and
receives the group's results. They run as a second app, ``canvas_app``, with the Redis
result backend (its own workers), so the figures above keep Celery without one. "Done"
is the callback's (or the chain's last task's) ``date_done`` in that backend.
"""

from __future__ import annotations

import os
from datetime import UTC

import redis
from celery import Celery, chain, chord, group
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


canvas_app = Celery("peer_celery_canvas", broker=BROKER_URL, backend=BROKER_URL)


@canvas_app.task(name="canvas.noop")
def canvas_noop(n: int) -> int:
    return record_start(n)


@canvas_app.task(name="canvas.collect")
def canvas_collect(results: list[int], n: int) -> int:
    """A chord's callback: the group's results come as its first argument."""
    record_start(n)
    return len(results)


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

    def start_workers(self, processes: int, app: str = "peer_celery"):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH_DIR), str(ROOT)])}
        command = [python(), "-m", "celery", "-A", app, "worker", "-P", "prefork", f"-c{processes}"]
        flags = ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning"]
        return [spawn([*command, *flags], env, "celery")]

    workflows = True

    def start_workflow_workers(self, processes: int):
        return self.start_workers(processes, app="peer_celery:canvas_app")

    def enqueue_chord(self, args: list[int], callback_arg: int):
        return chord([canvas_noop.s(arg) for arg in args])(canvas_collect.s(callback_arg))

    def enqueue_chain(self, args: list[int]):
        # Immutable signatures: each step takes its own argument, not the previous result.
        return chain(*(canvas_noop.si(arg) for arg in args)).apply_async()

    def finished_at(self, handle) -> float | None:
        if not handle.ready():
            return None
        if not handle.successful():
            raise RuntimeError(f"workflow task {handle.id} ended {handle.state}")
        done = handle.date_done
        return (done if done.tzinfo else done.replace(tzinfo=UTC)).timestamp()

    def done(self) -> int:
        return int(self.redis.get(DONE_KEY) or 0)

    def close(self) -> None:
        self.redis.close()
        canvas_app.close()


ADAPTER = CeleryPeer
