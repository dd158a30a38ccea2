"""An idempotency key names one request, schedule included: another run_at or delay is a 422."""

from __future__ import annotations

import pytest

from queue_app.models import Job
from tests.web.conftest import post_json

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_same_key_with_another_run_at_is_422(production_port, token):
    body = {"type": "demo.echo", "idempotency_key": "at-nine", "run_at": "2040-01-01T09:00:00Z"}
    assert post_json(production_port, "/api/jobs/", body, token)[0] == 201
    # The same instant written with another offset is the same request.
    same = {**body, "run_at": "2040-01-01T10:00:00+01:00"}
    assert post_json(production_port, "/api/jobs/", same, token)[0] == 200
    status, error = post_json(
        production_port, "/api/jobs/", {**body, "run_at": "2040-01-01T10:00:00Z"}, token
    )
    assert (status, error["code"]) == (422, "idempotency_key_reused")
    assert "idempotency_key" in error["errors"]
    status, error = post_json(production_port, "/api/jobs/", {**body, "run_at": None}, token)
    assert status == 422
    assert Job.objects.count() == 1


def test_same_key_with_another_delay_is_422_and_the_same_delay_repeats(production_port, token):
    body = {"type": "demo.echo", "idempotency_key": "later", "delay_seconds": 60}
    status, first = post_json(production_port, "/api/jobs/", body, token)
    assert status == 201
    # A retry of the same request, some time later, is still the same request.
    status, again = post_json(production_port, "/api/jobs/", body, token)
    assert (status, again["id"]) == (200, first["id"])
    status, error = post_json(production_port, "/api/jobs/", {**body, "delay_seconds": 3600}, token)
    assert (status, error["code"]) == (422, "idempotency_key_reused")
    status, error = post_json(production_port, "/api/jobs/", {**body, "delay_seconds": None}, token)
    assert status == 422
    assert Job.objects.count() == 1


def test_bulk_items_fingerprint_their_schedule_too(production_port, token):
    job = {"type": "demo.echo", "idempotency_key": "bulk-at", "run_at": "2040-01-01T09:00:00Z"}
    assert post_json(production_port, "/api/jobs/bulk/", {"jobs": [job]}, token)[0] == 201
    moved = {**job, "run_at": "2040-01-02T09:00:00Z"}
    status, error = post_json(production_port, "/api/jobs/bulk/", {"jobs": [moved]}, token)
    assert status == 422
    assert error["items"][0]["code"] == "idempotency_key_reused"
    assert Job.objects.count() == 1
