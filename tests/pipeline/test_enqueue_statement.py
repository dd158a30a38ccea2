"""Enqueue as one statement: what it commits on its own, inside a caller's transaction, and under races."""

import threading

import psycopg
import pytest
from django.db import connection, transaction
from django.forms.models import model_to_dict

from queue_app.exceptions import JobsRejected
from queue_app.models import Job, JobLog, OutboxMessage
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs


def _other_connection() -> psycopg.Connection:
    """A connection outside Django's: it sees only what has committed."""
    params = connection.get_connection_params()
    for name in ("cursor_factory", "context", "server_side_binding"):
        params.pop(name, None)
    return psycopg.connect(**params, autocommit=True)


COMMITTED_COUNTS = """
SELECT (SELECT count(*) FROM queue_app_jobs WHERE id = ANY(%(ids)s::uuid[])),
       (SELECT count(*) FROM queue_app_job_logs WHERE job_id = ANY(%(ids)s::uuid[])),
       (SELECT count(*) FROM queue_app_job_outbox WHERE job_id = ANY(%(ids)s::uuid[]))
"""


def _committed_rows(job_ids) -> tuple[int, int, int]:
    """Jobs, log rows and outbox rows of ``job_ids`` that another connection sees."""
    with _other_connection() as other:
        return other.execute(COMMITTED_COUNTS, {"ids": [str(job_id) for job_id in job_ids]}).fetchone()


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_one_statement_commits_job_log_and_outbox(django_assert_num_queries):
    with django_assert_num_queries(1):
        job = enqueue_job("demo.echo", {"n": 1})
    assert not connection.in_atomic_block
    # Committed before enqueue_job returned: another connection sees all three rows.
    assert _committed_rows([job.id]) == (1, 1, 1)


@pytest.mark.django_db(transaction=True)
def test_a_bulk_without_keys_is_one_statement_in_request_order(django_assert_num_queries):
    requests = [JobRequest(type="demo.echo", payload={"i": i}, queue="default") for i in range(300)]
    with django_assert_num_queries(1):
        jobs = enqueue_jobs(requests)
    assert _committed_rows([job.id for job in jobs]) == (300, 300, 300)
    # The relay sends outbox rows in id order: that order must be the request order.
    outbox_order = list(OutboxMessage.objects.order_by("id").values_list("job_id", flat=True))
    assert outbox_order == [job.id for job in jobs]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_caller_transaction_leaves_nothing_of_a_keyed_bulk():
    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        jobs = enqueue_jobs([JobRequest(type="demo.echo", idempotency_key=f"k{i}") for i in range(3)])
        raise Abort
    assert _committed_rows([job.id for job in jobs]) == (0, 0, 0)
    assert not Job.objects.exists() and not JobLog.objects.exists() and not OutboxMessage.objects.exists()


@pytest.mark.django_db
def test_a_key_conflict_undoes_the_call_but_not_the_callers_earlier_work():
    enqueue_job("demo.echo", {"v": 1}, idempotency_key="taken")
    with transaction.atomic():
        earlier = enqueue_job("demo.echo", {"earlier": True})
        with pytest.raises(JobsRejected):
            enqueue_jobs(
                [
                    JobRequest(type="demo.echo", idempotency_key="new"),
                    JobRequest(type="demo.echo", payload={"v": 2}, idempotency_key="taken"),
                ]
            )
        # The caller's transaction is still usable and keeps its own job.
        assert Job.objects.filter(id=earlier.id).exists()
    assert not Job.objects.filter(idempotency_key="new").exists()
    assert Job.objects.count() == 2 and JobLog.objects.count() == 2 and OutboxMessage.objects.count() == 2


@pytest.mark.django_db
def test_returned_jobs_equal_their_stored_rows(django_user_model):
    from datetime import timedelta

    from django.utils import timezone

    owner = django_user_model.objects.create_user("owner")
    requests = [
        # Text the bulk's JSON must carry through escaped: quotes, a backslash, a newline, non-BMP.
        JobRequest(
            type="demo.echo",
            payload={"s": 'é "q" \\ \n \U0001f600', "n": [1, 2]},
            priority="high",
            idempotency_key="a",
        ),
        JobRequest(type="demo.echo", run_at=timezone.now() + timedelta(hours=1), max_attempts=7),
        # Another UTC offset, and a key: the bulk's JSON carries both exactly.
        JobRequest(
            type="demo.echo",
            run_at=(timezone.now() + timedelta(hours=2)).astimezone(timezone.get_fixed_timezone(120)),
            idempotency_key="b",
        ),
    ]
    returned = enqueue_jobs(requests, owner=owner)
    again = enqueue_jobs(requests[:1], owner=owner)[0]
    repeated = enqueue_jobs([requests[2], requests[0]], owner=owner)
    assert [job.id for job in repeated] == [returned[2].id, returned[0].id]
    assert not any(job.was_created for job in repeated)
    assert returned[2].next_retry_at == requests[2].run_at
    for job in [*returned, again, *repeated]:
        # Asked first: reading a deferred field below would load it.
        if job.was_created:  # built from what was sent, with every field set: none is read back
            assert set(job.get_deferred_fields()) == set()
        stored = Job.objects.get(id=job.id)
        assert model_to_dict(job) == model_to_dict(stored)
        assert (job.created_at, job.enqueued_at) == (stored.created_at, stored.enqueued_at)
        assert not job._state.adding and job._state.db == "default"
    assert [job.was_created for job in returned] == [True, True, True] and not again.was_created
    assert again.id == returned[0].id


def test_job_has_no_init_signal_receivers():
    """Created jobs are built without Model.__init__ (enqueue._loaded_job): a receiver
    of pre_init or post_init for Job would not run for them."""
    from django.db.models.signals import post_init, pre_init

    assert not pre_init.has_listeners(Job) and not post_init.has_listeners(Job)


def _race_two_bulks(forward: list[JobRequest], backward: list[JobRequest]) -> dict[str, list[Job]]:
    """Run two bulks at the same moment, each in its own transaction on its own connection."""
    barrier = threading.Barrier(2)
    results: dict[str, list[Job]] = {}
    errors: list[BaseException] = []

    def submit(name: str, requests: list[JobRequest]) -> None:
        try:
            barrier.wait(timeout=30)
            with transaction.atomic():
                results[name] = enqueue_jobs(requests)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=submit, args=("forward", forward)),
        threading.Thread(target=submit, args=("backward", backward)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    return results


@pytest.mark.django_db(transaction=True)
def test_bulks_sharing_keys_in_opposite_orders_do_not_deadlock():
    """Keys are inserted sorted: two calls wait on each other, never each holding what the other needs."""
    rounds, size = 5, 400
    for round_number in range(rounds):
        requests = [
            JobRequest(type="demo.echo", payload={"i": i}, idempotency_key=f"{round_number}-{i:04d}")
            for i in range(size)
        ]
        results = _race_two_bulks(requests, requests[::-1])
        forward = {job.idempotency_key: job.id for job in results["forward"]}
        backward = {job.idempotency_key: job.id for job in results["backward"]}
        assert forward == backward
        assert sum(job.was_created for job in results["forward"] + results["backward"]) == size
    assert Job.objects.count() == OutboxMessage.objects.count() == JobLog.objects.count() == rounds * size


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def _forget_prepared_statements() -> None:
    """A pooled connection keeps what earlier tests prepared: start from none."""
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    assert _prepared_statements() == []


@pytest.mark.django_db(transaction=True)
def test_the_enqueue_statement_runs_prepared_on_the_connection():
    """Django opens connections with prepare_threshold None, on which psycopg prepares
    nothing even when asked to: the hot statements must be prepared all the same."""
    _forget_prepared_statements()
    enqueue_job("demo.echo")
    enqueue_job("demo.echo")
    [statement] = _prepared_statements()
    assert "INSERT INTO queue_app_jobs" in statement


@pytest.mark.django_db(transaction=True)
def test_a_prepare_threshold_in_the_options_is_obeyed():
    """Behind PgBouncer in transaction mode (DATABASE_PGBOUNCER) the OPTIONS say None: never prepare."""
    options = connection.settings_dict.setdefault("OPTIONS", {})
    options["prepare_threshold"] = None
    try:
        _forget_prepared_statements()
        connection.connection.prepare_threshold = None  # as Django opens it with those OPTIONS
        for _ in range(10):
            enqueue_job("demo.echo")
        assert _prepared_statements() == []
    finally:
        del options["prepare_threshold"]
