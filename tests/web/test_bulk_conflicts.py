"""Concurrent bulk requests sharing idempotency keys in opposite order: a collision in PostgreSQL
(deadlock, serialization failure) is retried, and never reported as the store being unavailable."""

from __future__ import annotations

import json
import threading

import pytest

from queue_app.models import Job
from tests.web.conftest import request
from tests.web.server import running

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True), pytest.mark.redis]

KEYS = 40
TRIALS = 6


def opposite_bulks(port: int, token: str, trial: int) -> list[tuple[int, dict]]:
    """Two bulks of the same keys, one in each order, released at the same moment."""
    jobs = [
        {"type": "demo.echo", "payload": {"k": n}, "idempotency_key": f"t{trial}-k{n}"} for n in range(KEYS)
    ]
    bodies = [json.dumps({"jobs": jobs}).encode(), json.dumps({"jobs": jobs[::-1]}).encode()]
    start = threading.Barrier(2)
    results: list[tuple[int, dict]] = []

    def send(body: bytes) -> None:
        start.wait()
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        response, content = request(port, "POST", "/api/jobs/bulk/", body, **headers)
        results.append((response.status, json.loads(content)))

    threads = [threading.Thread(target=send, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(results) == 2
    return results


def test_opposite_order_bulks_both_succeed_with_one_job_per_key(production_port, token):
    for trial in range(TRIALS):
        results = opposite_bulks(production_port, token, trial)
        assert sorted(status for status, _ in results) in ([200, 201], [201, 201]), results
        first, second = ({job["idempotency_key"]: job["id"] for job in body["jobs"]} for _, body in results)
        assert first == second  # the same job for each key, whichever request made it
    assert Job.objects.count() == KEYS * TRIALS


def test_without_retries_a_collision_is_a_retryable_409_not_a_503(token):
    with running("runweb", API_TRANSACTION_RETRIES="0") as port:
        for trial in range(TRIALS):
            for status, body in opposite_bulks(port, token, trial):
                assert status in (200, 201, 409), body
                if status == 409:
                    assert body["code"] == "transaction_conflict"
    # Whatever collided wrote nothing: at most one job per key.
    assert Job.objects.count() <= KEYS * TRIALS
