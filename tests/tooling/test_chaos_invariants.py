"""The chaos run's overlap invariant, over log trails and journals written by hand.

A chaos run (seed 1) found a job whose first attempt's worker was paused while a
client cancelled and retried the job. A rescue confirmed the cancel once the lease
had expired (``lease_expired_cancelled``), the retry ran on another worker, and the
paused attempt woke beside it. That overlap is the one the guarantee allows (its
lease expired: docs/explanation/guarantees.md). The same overlap after a cancel
that its worker confirmed, with the lease held, is not.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from queue_app.models import JobLog
from queue_app.services import enqueue_job
from tests.helpers import PROJECT_ROOT

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def invariants(monkeypatch):
    monkeypatch.syspath_prepend(str(PROJECT_ROOT / "scripts"))
    from chaoslib import invariants

    return invariants


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _execution(name: str, job_id: str, attempt: int, started: float, ended: float) -> dict:
    return {
        "execution": name,
        "job": job_id,
        "attempt": attempt,
        "fence": attempt,
        "pid": 1,
        "at": _at(started).timestamp(),
        "ended_at": _at(ended).timestamp(),
        "outcome": "returned",
    }


@pytest.mark.parametrize(
    ("first_attempt_ended_by", "overlap_allowed"),
    [("lease_expired_cancelled", True), ("cancel_confirmed", False)],
)
def test_a_cancelled_and_retried_attempt_may_overlap_the_retry_only_if_its_lease_expired(
    invariants, first_attempt_ended_by, overlap_allowed
):
    job = enqueue_job("probe.run")
    trail = [
        (0.0, "claimed", {"attempt": 1, "fence": 1}),
        (2.5, "cancel_requested", {}),
        (2.6, "retry_requested", {}),
        (3.8, first_attempt_ended_by, {"attempt": 1}),
        (3.81, "retried", {}),
        (3.9, "claimed", {"attempt": 2, "fence": 2}),
    ]
    JobLog.objects.bulk_create(
        JobLog(job_id=job.id, event=event, extra=extra, created_at=_at(seconds))
        for seconds, event, extra in trail
    )
    # The first execution runs on until 5.0 s, past the second one's start at 3.95 s.
    invariants.load(
        [],
        [
            _execution("first", str(job.id), 1, started=0.01, ended=5.0),
            _execution("second", str(job.id), 2, started=3.95, ended=4.5),
        ],
    )

    [result] = invariants.run_sql_checks(cancel_race_seconds=2.0, names=["no_two_executions_overlap"])

    assert result.checked == 2
    assert result.violations == (0 if overlap_allowed else 1)
