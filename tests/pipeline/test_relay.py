"""The relay: NOTIFY wake-up, several relays sharing the outbox, pruning."""

import subprocess
import threading
import time

import psycopg
import pytest
from django.db import connection
from django.db.models.functions import Now

from queue_app import broker, services
from queue_app.engine.outbox import notify_relay
from queue_app.models import OutboxMessage
from queue_app.runtime.relay import Relay
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import kill_group, listening_backends, manage, ready_ids, ready_score, wait_until

# The relay's own path: no job is pushed by its enqueuer.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.redis,
    pytest.mark.usefixtures("relay_path"),
]


@pytest.mark.processes
def test_relay_wakes_on_notify_long_before_its_poll_interval(redis_client):
    before = listening_backends()
    relay = manage("runrelay", "--poll=60", stderr=subprocess.DEVNULL)
    try:
        # A NOTIFY sent before the LISTEN is lost, and the next poll is 60 s away.
        wait_until(lambda: listening_backends() - before, message="the relay's LISTEN")
        job = enqueue_job("demo.echo")
        # With a 60 s poll, only the NOTIFY sent at commit can deliver it this fast.
        wait_until(lambda: ready_score(redis_client, str(job.id)) is not None, timeout=10)
    finally:
        kill_group(relay)


def test_a_row_committed_between_the_first_drain_and_the_listen_goes_out_without_a_poll(
    redis_client, monkeypatch
):
    """A NOTIFY reaches only sessions already listening: a row committed after the relay's
    drain read the outbox and before its LISTEN registered would wait out the poll. A new
    LISTEN is followed by one more drain."""
    original_listen = Relay._listen
    late: list = []

    def listen_after_a_commit(relay):
        if not late:
            late.append(enqueue_job("demo.echo"))  # committed, and notified to nobody yet
        return original_listen(relay)

    monkeypatch.setattr(Relay, "_listen", listen_after_a_commit)
    relay = Relay(poll_seconds=60)

    def run():
        try:
            relay.run()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_until(lambda: late, message="the relay's LISTEN")
        wait_until(lambda: ready_score(redis_client, str(late[0].id)) is not None, timeout=10)
    finally:
        relay.stopping = True
        notify_relay()  # wakes it from its wait to see the stop
        thread.join(timeout=30)
    assert not thread.is_alive()


def test_two_relays_share_the_outbox_without_sending_a_row_twice(redis_client, monkeypatch):
    enqueue_jobs([JobRequest(type="demo.echo") for _ in range(2000)])
    sent: list[int] = []
    original = broker.apply

    def counting_apply(client, intents):
        intents = list(intents)
        sent.append(len(intents))
        original(client, intents)

    monkeypatch.setattr(broker, "apply", counting_apply)

    def drain():
        try:
            Relay(batch_size=100).drain()
        finally:
            connection.close()

    threads = [threading.Thread(target=drain) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(sent) == 2000  # SKIP LOCKED: no row was locked by both
    assert not OutboxMessage.objects.filter(dispatched_at__isnull=True).exists()
    assert redis_client.zcard(broker.priority_key("default")) == 2000


def _two_relays_one_slow(monkeypatch, batch_size: int) -> None:
    """Relay A applies its first batch slowly; relay B starts meanwhile. Both drain."""
    original = broker.apply
    applying, first = threading.Event(), [True]

    def slow_first_apply(client, intents):
        intents = list(intents)
        if first and first.pop():
            applying.set()
            time.sleep(1)
        original(client, intents)

    monkeypatch.setattr(broker, "apply", slow_first_apply)

    def drain():
        try:
            Relay(batch_size=batch_size).drain()
        finally:
            connection.close()

    relay_a = threading.Thread(target=drain)
    relay_a.start()
    assert applying.wait(10)
    relay_b = threading.Thread(target=drain)
    relay_b.start()
    relay_a.join()
    relay_b.join()


def test_two_relays_keep_a_fifo_queue_in_enqueue_order(queue_config, redis_client, monkeypatch):
    queue_config(QUEUES="default,bulk:fifo")
    ids = [str(enqueue_job("demo.echo", queue="bulk").id) for _ in range(6)]

    _two_relays_one_slow(monkeypatch, batch_size=3)

    # Without turns, the second relay pushed jobs 4-6 while the first still held 1-3.
    assert redis_client.lrange(broker.fifo_key("bulk"), 0, -1) == ids


def test_two_relays_apply_a_cancel_and_the_retry_after_it_in_that_order(
    queue_config, redis_client, monkeypatch
):
    queue_config(QUEUES="default,bulk:fifo")  # a FIFO list removes by id
    job = enqueue_job("demo.echo", queue="bulk")
    Relay().drain()
    services.cancel_job(job.id)  # an outbox row removing it from Redis
    services.retry_job(job.id)  # then one adding it back

    _two_relays_one_slow(monkeypatch, batch_size=1)

    # Applied the other way round, the removal took the queued job out of every structure.
    assert str(job.id) in redis_client.lrange(broker.fifo_key("bulk"), 0, -1)


def test_a_relay_skips_rows_another_transaction_holds_instead_of_waiting(redis_client):
    jobs = enqueue_jobs([JobRequest(type="demo.echo") for _ in range(30)])
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "server_side_binding"):
        params.pop(key, None)
    # Another relay, mid-batch: the ten oldest rows locked in an open transaction.
    with psycopg.connect(**params) as holder:
        held = {
            row[0]
            for row in holder.execute(
                "SELECT job_id FROM queue_app_job_outbox WHERE dispatched_at IS NULL"
                " ORDER BY id LIMIT 10 FOR UPDATE"
            )
        }
        # A plain FOR UPDATE would queue behind the holder: fail after 5 s instead of hanging.
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '5s'")
        try:
            sent = Relay(batch_size=7).drain()
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
        assert sent == 20
        ready = set(ready_ids(redis_client))
        assert ready == {str(job.id) for job in jobs} - {str(job_id) for job_id in held}
        assert set(OutboxMessage.objects.filter(dispatched_at=None).values_list("job_id", flat=True)) == held
        holder.rollback()
    # Released, the held rows go out on the next drain.
    assert Relay(batch_size=7).drain() == 10
    assert redis_client.zcard(broker.priority_key("default")) == 30


def test_dispatched_rows_are_pruned_after_the_retention(queue_config):
    queue_config(OUTBOX_RETENTION_SECONDS=60)
    old, recent = enqueue_job("demo.echo"), enqueue_job("demo.echo")
    pending = enqueue_job("demo.echo")
    relay = Relay()
    relay.drain()
    OutboxMessage.objects.filter(job=pending).update(dispatched_at=None)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_app_job_outbox SET dispatched_at = now() - interval '2 minutes' WHERE job_id = %s",
            [old.id],
        )
    assert relay.prune() == 1
    assert set(OutboxMessage.objects.values_list("job_id", flat=True)) == {recent.id, pending.id}
    assert OutboxMessage.objects.filter(job=recent, dispatched_at__lte=Now()).exists()
