"""The relay's claims: rows are claimed in a short statement, pushed with no database lock
held, then marked. Several relays work at once without waiting on each other."""

import threading
import time

import psycopg
import pytest
from django.db import connection

from queue_app import broker, services
from queue_app.engine import execution, outbox, sql
from queue_app.models import OutboxMessage
from queue_app.runtime.relay import Relay, row_intent
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import claim_jobs, ready_ids

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.redis,
    pytest.mark.usefixtures("relay_path"),
]


def undispatched() -> set[str]:
    return {
        str(job_id)
        for job_id in OutboxMessage.objects.filter(dispatched_at=None).values_list("job_id", flat=True)
    }


def claim(limit: int, fifo_queues=()) -> outbox.OutboxClaim:
    """Another relay's claim, as it stands while that relay pushes."""
    return outbox.claim_outbox(limit=limit, claim_seconds=60, fifo_queues=fifo_queues)


def test_a_relay_sends_while_another_is_stuck_in_its_push(redis_client, monkeypatch):
    """The push holds no lock: another relay neither waits for it nor sends its rows."""
    first = enqueue_job("demo.echo")
    original = broker.apply
    pushing, go_on = threading.Event(), threading.Event()

    def stuck_apply(client, intents):
        if threading.current_thread() is not threading.main_thread():
            pushing.set()
            go_on.wait(30)  # Redis answers late (or, down, after its timeout)
        original(client, intents)

    monkeypatch.setattr(broker, "apply", stuck_apply)

    def stuck_relay():
        try:
            Relay().drain()
        finally:
            connection.close()

    thread = threading.Thread(target=stuck_relay)
    thread.start()
    try:
        assert pushing.wait(30)
        second = enqueue_job("demo.echo")
        # A lock held across the push would make this wait: fail after 5 s instead.
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '5s'")
        started = time.monotonic()
        assert Relay().drain() == 1  # the second job's row, not the first's (claimed)
        assert time.monotonic() - started < 5
        assert ready_ids(redis_client) == [str(second.id)]
        assert undispatched() == {str(first.id)}
    finally:
        go_on.set()
        thread.join(30)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert set(ready_ids(redis_client)) == {str(first.id), str(second.id)}
    assert undispatched() == set()


def test_a_relay_that_dies_after_its_push_leaves_its_rows_to_another_once_its_claim_runs_out(
    redis_client, queue_config
):
    queue_config(RELAY_CLAIM_SECONDS=1)
    jobs = enqueue_jobs([JobRequest(type="demo.echo") for _ in range(3)])
    doomed = Relay()

    def die(point):
        raise SystemExit(point)  # the process ends here: pushed, not marked

    doomed._fault = die
    with pytest.raises(SystemExit):
        doomed.drain()
    assert len(ready_ids(redis_client)) == 3
    assert undispatched() == {str(job.id) for job in jobs}
    assert Relay().drain() == 0  # still claimed: another relay passes over the rows
    time.sleep(1.1)
    redis_client.flushdb()  # so the second push shows
    assert Relay().drain() == 3  # the claim ran out: sent again, at least once
    assert sorted(ready_ids(redis_client)) == sorted(str(job.id) for job in jobs)
    assert undispatched() == set()


def test_a_push_that_fails_leaves_the_rows_due_at_once(redis_client, settings):
    job = enqueue_job("demo.echo")
    reachable, settings.REDIS_URL = settings.REDIS_URL, "redis://127.0.0.1:1/0"  # nothing listens there
    try:
        with pytest.raises(broker.REDIS_ERRORS):
            Relay().drain()
    finally:
        settings.REDIS_URL = reachable
    # Not held for the claim's length: the next relay to reach Redis sends it now.
    assert OutboxMessage.objects.get(job=job).dispatch_after is None
    assert Relay().drain() == 1
    assert ready_ids(redis_client) == [str(job.id)]


def test_a_fifo_queue_waits_behind_rows_another_relay_holds(redis_client, queue_config):
    """A later row of a strict-FIFO queue must not reach the list before an earlier one a
    relay is still pushing; other queues' rows go meanwhile."""
    queue_config(QUEUES="default,bulk:fifo")
    fifo = [enqueue_job("demo.echo", queue="bulk") for _ in range(2)]
    other = enqueue_job("demo.echo")
    fifo.append(enqueue_job("demo.echo", queue="bulk"))
    held = claim(1, fifo_queues=["bulk"])  # the first FIFO row, mid-push elsewhere
    assert [row.job_id for row in held.rows] == [str(fifo[0].id)]

    assert Relay().drain() == 1
    assert ready_ids(redis_client) == [str(other.id)]
    assert redis_client.llen(broker.fifo_key("bulk")) == 0

    # The other relay's push lands, then its mark: the line moves on, in order.
    broker.apply(redis_client, [row_intent(row, {"default": False, "bulk": True}) for row in held.rows])
    assert outbox.finish_outbox_claim(held) == (1, 0)
    assert Relay().drain() == 2
    assert redis_client.lrange(broker.fifo_key("bulk"), 0, -1) == [str(job.id) for job in fifo]


def test_two_relays_claiming_at_once_take_a_fifo_line_whole_or_not_at_all(queue_config):
    """Two claims running at the same moment: the second skips the rows the first has
    locked, and must not take the queue's later rows in their stead."""
    queue_config(QUEUES="default,bulk:fifo")
    fifo = [enqueue_job("demo.echo", queue="bulk") for _ in range(4)]
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "server_side_binding"):
        params.pop(key, None)
    with psycopg.connect(**params) as first:
        # The first relay's claim, its transaction not yet committed: two rows locked.
        taken = first.execute(
            sql.query("claim_outbox"), {"limit": 2, "claim_seconds": 60, "fifo_queues": ["bulk"]}
        ).fetchall()
        assert [str(row[1]) for row in taken] == [str(job.id) for job in fifo[:2]]
        assert claim(10, fifo_queues=["bulk"]).rows == []
        first.commit()
    assert claim(10, fifo_queues=["bulk"]).rows == []  # still held, now by a committed claim


def test_a_row_whose_job_changed_during_the_push_is_sent_again_as_the_job_is_then(redis_client, monkeypatch):
    """Relay A reads the job queued; before its push lands, the job is cancelled and relay B
    sends the cancel's removal. A's push then puts the cancelled job back: the mark sees
    the job row changed since the claim read it, and the row goes again."""
    job = enqueue_job("demo.echo")
    member = broker.ready_member(job.id, job.enqueued_at)
    original = broker.apply
    meanwhile: list[int] = []
    pushes: list[list] = []

    def apply_after_a_cancel(client, intents):
        intents = list(intents)
        pushes.append(intents)
        if not meanwhile:
            meanwhile.append(0)
            services.cancel_job(job.id)
            meanwhile[0] = Relay().drain()  # relay B: the removal, ahead of A's push
        original(client, intents)

    monkeypatch.setattr(broker, "apply", apply_after_a_cancel)
    Relay().drain()
    assert meanwhile == [1]
    assert redis_client.zscore(broker.priority_key("default"), member) is None
    assert [intent.action for push in pushes for intent in push] == ["enqueue", "remove", "remove"]
    assert undispatched() == set()


def test_a_relay_stops_when_only_rows_other_relays_hold_are_left(redis_client):
    enqueue_jobs([JobRequest(type="demo.echo") for _ in range(5)])
    held = claim(5)
    calls = []
    relay = Relay(batch_size=5)
    original = relay.relay_batch

    def counted():
        calls.append(1)
        return original()

    relay.relay_batch = counted
    assert relay.drain() == 0
    assert len(calls) == 1
    assert len(held.rows) == 5


def test_a_retry_due_by_the_time_the_relay_claims_its_row_goes_to_the_ready_set(redis_client):
    """A retry with a short backoff: by the relay's claim its time has come, and its
    schedule row (the only row the retry writes) puts it in line at its ready member."""
    job = enqueue_job("demo.echo")
    relay = Relay()
    relay.drain()
    [claimed] = claim_jobs([str(job.id)], worker_id="relay-test-worker")
    assert execution.fail_job(str(job.id), claimed.fence, "RuntimeError: once", delay=0) == "queued"
    assert OutboxMessage.objects.filter(job_id=job.id, action=OutboxMessage.Action.SCHEDULE).exists()
    redis_client.flushdb()  # what the first push and the pop left is no part of this
    assert relay.drain() == 1
    job.refresh_from_db()
    assert ready_ids(redis_client) == [str(job.id)]
    assert redis_client.zcard(broker.retry_key("default")) == 0
    assert redis_client.zrange(broker.priority_key("default"), 0, -1) == [
        broker.ready_member(str(job.id), job.enqueued_at)
    ]


def test_an_enqueue_row_sent_after_the_jobs_retry_leaves_the_retry_in_place(redis_client):
    """The enqueuer pushed the job itself, so its enqueue row waits out RELAY_GRACE_SECONDS;
    meanwhile the job ran, failed, and its retry (due at once) reached the retry set. The
    late enqueue row names the job's first place: it takes that member out of the ready set
    and leaves the retry set alone (taking the id out of it lost the retry for good)."""
    job = enqueue_job("demo.echo")
    [claimed] = claim_jobs([str(job.id)], worker_id="relay-test-worker")
    assert execution.fail_job(str(job.id), claimed.fence, "RuntimeError: once", delay=0) == "queued"
    job.refresh_from_db()
    first_place = OutboxMessage.objects.get(job_id=job.id, action=OutboxMessage.Action.ENQUEUE).member
    retry = broker.retry_key("default")
    redis_client.zadd(broker.priority_key("default"), {first_place: 0})
    redis_client.zadd(retry, {str(job.id): broker.due_score(job.next_retry_at)})

    late = [row for row in claim(10).rows if row.action == OutboxMessage.Action.ENQUEUE]
    broker.apply(redis_client, [row_intent(row, {"default": False}) for row in late])

    assert redis_client.zrange(retry, 0, -1) == [str(job.id)]
    assert redis_client.zrange(broker.priority_key("default"), 0, -1) == []
