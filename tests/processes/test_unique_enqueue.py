"""Unique keys under a real race: processes, each with its own connection, enqueue at once.

They wait on an advisory lock the test holds and are let go together, so their
enqueues overlap in PostgreSQL. One job per key must come out, every process
must get that job back, and bulks taking shared keys in different orders must
not deadlock (the locks are taken in one order).
"""

import json
import subprocess
import sys

import psycopg
import pytest
from django.db import connection

from queue_app.models import Job, JobLog, OutboxMessage
from tests.helpers import PROJECT_ROOT, child_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]

PROCESSES = 6
BARRIER = (0x7465, 0x7374)  # an advisory lock no code of the queue takes

CHILD = """
import json, sys
import django
django.setup()
from django.db import connection
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs

number, mode = int(sys.argv[1]), sys.argv[2]
with connection.cursor() as cursor:  # wait for the start: the test holds the lock exclusively
    cursor.execute("SELECT pg_advisory_lock_shared(%s, %s)", [{classid}, {objid}])
    cursor.execute("SELECT pg_advisory_unlock_shared(%s, %s)", [{classid}, {objid}])
if mode == "one":
    jobs = [enqueue_job("demo.echo", {{"process": number}}, unique_key="race")]
else:
    keys = ["a", "b", "c", "d"]
    keys = keys[number % 4:] + keys[:number % 4]  # each process asks in another order
    keys = keys if number % 2 else keys[::-1]
    requests = [JobRequest(type="demo.echo", payload={{"process": number}}, unique_key=key) for key in keys]
    jobs = enqueue_jobs(requests)
print(json.dumps([[job.unique_key, str(job.id), job.was_created] for job in jobs]))
""".format(classid=BARRIER[0], objid=BARRIER[1])


def _other_connection() -> psycopg.Connection:
    params = connection.get_connection_params()
    for name in ("cursor_factory", "context", "server_side_binding"):
        params.pop(name, None)
    return psycopg.connect(**params, autocommit=True)


def _waiting_at_the_barrier(gate: psycopg.Connection) -> int:
    return gate.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        " AND classid = %s AND objid = %s",
        BARRIER,
    ).fetchone()[0]


def _race(mode: str, processes: int) -> list[list]:
    """Start the processes, let them go at once, and return what each enqueue returned."""
    with _other_connection() as gate:
        gate.execute("SELECT pg_advisory_lock(%s, %s)", BARRIER)
        children = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, str(number), mode],
                cwd=PROJECT_ROOT,
                env=child_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for number in range(processes)
        ]
        try:
            wait_until(
                lambda: _waiting_at_the_barrier(gate) == processes,
                timeout=120,
                message="every process waiting at the start",
            )
            gate.execute("SELECT pg_advisory_unlock(%s, %s)", BARRIER)
            outputs = [child.communicate(timeout=120) for child in children]
        finally:
            for child in children:
                child.kill()
    assert [child.returncode for child in children] == [0] * processes, [err[-2000:] for _, err in outputs]
    return [json.loads(out) for out, _ in outputs]


def test_concurrent_enqueues_of_one_key_create_exactly_one_job():
    results = [jobs[0] for jobs in _race("one", PROCESSES)]

    assert len({job_id for _, job_id, _ in results}) == 1
    assert sorted(created for _, _, created in results) == [False] * (PROCESSES - 1) + [True]
    assert (Job.objects.count(), JobLog.objects.count(), OutboxMessage.objects.count()) == (1, 1, 1)


def test_concurrent_bulks_sharing_keys_in_different_orders_create_one_job_per_key():
    results = [job for jobs in _race("bulk", 4) for job in jobs]

    ids_by_key: dict[str, set[str]] = {}
    created_by_key: dict[str, int] = {}
    for key, job_id, created in results:
        ids_by_key.setdefault(key, set()).add(job_id)
        created_by_key[key] = created_by_key.get(key, 0) + created
    assert {key: len(ids) for key, ids in ids_by_key.items()} == dict.fromkeys("abcd", 1)
    assert created_by_key == dict.fromkeys("abcd", 1)
    assert sorted(Job.objects.values_list("unique_key", flat=True)) == list("abcd")
