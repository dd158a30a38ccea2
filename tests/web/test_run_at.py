"""A job's start time is ``run_at`` in requests and responses alike."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from tests.web.conftest import post_json, request

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def get_job(port: int, job_id: str, token: str) -> dict:
    response, content = request(port, "GET", f"/api/jobs/{job_id}/", Authorization=f"Token {token}")
    assert response.status == 200
    return json.loads(content)


def test_a_scheduled_job_answers_with_the_run_at_it_was_given(production_port, token):
    status, job = post_json(
        production_port, "/api/jobs/", {"type": "demo.echo", "run_at": "2040-01-01T09:00:00+02:00"}, token
    )
    assert status == 201
    assert datetime.fromisoformat(job["run_at"]) == datetime.fromisoformat("2040-01-01T07:00:00+00:00")
    # next_retry_at stays for older clients: the same instant while the job waits.
    assert job["next_retry_at"] == job["run_at"]
    assert get_job(production_port, job["id"], token)["run_at"] == job["run_at"]


def test_a_delay_becomes_a_run_at(production_port, token):
    status, job = post_json(
        production_port, "/api/jobs/", {"type": "demo.echo", "delay_seconds": 3600}, token
    )
    assert status == 201
    waits = datetime.fromisoformat(job["run_at"]) - datetime.fromisoformat(job["created_at"])
    assert timedelta(minutes=59) < waits <= timedelta(hours=1)


def test_a_job_for_now_runs_from_its_submission(production_port, token):
    status, job = post_json(production_port, "/api/jobs/", {"type": "demo.echo"}, token)
    assert status == 201
    assert job["next_retry_at"] is None
    assert abs(datetime.fromisoformat(job["run_at"]) - datetime.fromisoformat(job["created_at"])) < timedelta(
        seconds=1
    )
