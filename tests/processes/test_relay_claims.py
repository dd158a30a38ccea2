"""Relay processes on real stores sharing the outbox: no relay waits on another's push."""

import socket
import subprocess
import threading

import pytest

from queue_app import broker
from queue_app.models import OutboxMessage
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import child_env, kill_group, manage, ready_ids, wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.redis,
    pytest.mark.processes,
    pytest.mark.usefixtures("relay_path"),
]


class SilentRedis:
    """Accepts connections, reads what comes, never answers: a hung Redis (or a network
    that swallows packets). A client waits on it until its socket timeout (30 s)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self._listener.getsockname()[1]}/0"
        self.received = threading.Event()
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._open.append(client)
            threading.Thread(target=self._swallow, args=(client,), daemon=True).start()

    def _swallow(self, client: socket.socket) -> None:
        try:
            while client.recv(65536):
                self.received.set()
        except OSError:
            pass

    def close(self) -> None:
        self._listener.close()
        for client in self._open:
            client.close()


@pytest.fixture
def silent_redis():
    server = SilentRedis()
    yield server
    server.close()


def test_a_relay_stuck_on_redis_holds_up_only_its_own_batch(processes, redis_client, silent_redis):
    first = enqueue_job("demo.echo")
    # Its claim outlasts the checks below (which take at most about 25 s) and runs out
    # before the push would time out and hand the row back.
    stuck = manage(
        "runrelay",
        env=child_env(REDIS_URL=silent_redis.url, JOBQUEUE_RELAY_CLAIM_SECONDS="29"),
        stderr=subprocess.DEVNULL,
    )
    processes.append(stuck)
    assert silent_redis.received.wait(60), "the stuck relay never pushed"

    healthy = manage("runrelay", stderr=subprocess.DEVNULL)
    processes.append(healthy)
    second = enqueue_job("demo.echo")
    # A relay holding a lock across its push would keep the healthy one waiting until the
    # stuck push times out, 30 s after it began.
    wait_until(lambda: str(second.id) in ready_ids(redis_client), timeout=20, message="the second job")
    assert str(first.id) not in ready_ids(redis_client)  # claimed by the stuck relay: not sent twice
    assert stuck.poll() is None

    kill_group(stuck)
    # Once its claim runs out, the healthy relay sends the dead relay's row.
    wait_until(lambda: str(first.id) in ready_ids(redis_client), timeout=45, message="the first job")
    wait_until(lambda: not OutboxMessage.objects.filter(dispatched_at=None).exists(), timeout=10)


def test_two_relays_drain_together_each_row_once_and_a_fifo_queue_in_order(
    processes, redis_client, queue_config
):
    queue_config(QUEUES="default,bulk:fifo")
    env = child_env(JOBQUEUE_QUEUES="default,bulk:fifo")
    relays = [manage("runrelay", "--batch-size=25", env=env, stderr=subprocess.DEVNULL) for _ in range(2)]
    processes.extend(relays)
    fifo, ready = [], []
    for _ in range(4):
        jobs = enqueue_jobs(
            [JobRequest(type="demo.echo", queue="bulk" if i % 2 else "default") for i in range(300)]
        )
        fifo += [str(job.id) for job in jobs if job.queue == "bulk"]
        ready += [str(job.id) for job in jobs if job.queue == "default"]

    wait_until(
        lambda: not OutboxMessage.objects.filter(dispatched_at=None).exists(),
        timeout=120,
        message="the outbox to drain",
    )
    # A row sent twice would show on the list, and one sent out of turn would move it.
    assert redis_client.lrange(broker.fifo_key("bulk"), 0, -1) == fifo
    assert sorted(ready_ids(redis_client)) == sorted(ready)
    assert all(relay.poll() is None for relay in relays)
