"""A Django app's tasks written for Celery (tests/celery_compat/shop/tasks.py), unchanged but
for their imports, on a real worker: retries with a countdown, autoretry_for with backoff,
bind=True reading self.request, a soft time limit, expiry, and the project's own
``debug_task`` from Celery's "First steps with Django"."""

import time
from datetime import datetime

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import transaction

from queue_app.contrib.celery.exceptions import TaskRevokedError
from queue_app.models import Job, JobLog
from tests.celery_compat.shop import services, tasks

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.processes,
    pytest.mark.redis,
    pytest.mark.usefixtures("celery_workers"),
]

TIMEOUT = 60


def retry_delays(job_id) -> list[float]:
    """Seconds from each failed attempt's retry row to the time it was due."""
    rows = JobLog.objects.filter(job_id=job_id, event="retry_scheduled").order_by("id")
    due = [(datetime.fromisoformat(row.extra["next_retry_at"]), row.created_at) for row in rows]
    return [(at - logged).total_seconds() for at, logged in due]


@pytest.fixture
def user():
    return get_user_model().objects.create_user("ada", email="ada@example.com", password="unused")


def test_autoretry_for_retries_a_dropped_mail_relay_with_backoff_and_the_task_sees_its_request(
    user, mail_dir
):
    services.fail_next("mail", 2)
    result = tasks.send_welcome_email.delay(user.pk)
    outcome = result.get(timeout=TIMEOUT)
    assert outcome == {"sent_to": "ada@example.com", "task_id": result.id, "retries": 2}
    job = Job.objects.get(id=result.id)
    assert job.queue == "mail" and job.attempts == 3 and job.max_attempts == 6
    # retry_backoff=True, retry_backoff_max=2: drawn from [0, 1] s, then [0, 2] s.
    delays = retry_delays(job.id)
    assert len(delays) == 2 and delays[0] <= 1 + 1e-6 and delays[1] <= 2 + 1e-6
    retries = JobLog.objects.filter(job_id=job.id, event="retry_scheduled").values_list("message", flat=True)
    assert set(retries) == {"SMTPServerDisconnected: Connection unexpectedly closed"}
    mails = [path.read_text() for path in mail_dir.iterdir()]
    assert len([mail for mail in mails if "To: ada@example.com" in mail]) == 1


def test_self_retry_with_a_countdown_runs_the_task_again_after_it():
    services.fail_next("rates", 1)
    result = tasks.refresh_exchange_rate.delay("EUR")
    assert result.get(timeout=TIMEOUT) == {"currency": "EUR", "rate": 1.08, "attempt": 2}
    assert cache.get("shop:rate:EUR") == 1.08
    (delay,) = retry_delays(result.id)
    assert 0.4 <= delay <= 0.5 + 1e-6


def test_self_retry_past_max_retries_fails_with_the_original_error():
    services.fail_next("rates", 10)
    result = tasks.refresh_exchange_rate.delay("GBP")
    with pytest.raises(services.RateServiceBusy, match="GBP not fetched"):
        result.get(timeout=TIMEOUT)
    assert result.state == "FAILURE"
    assert Job.objects.get(id=result.id).attempts == 4  # max_retries=3
    assert cache.get("shop:rate:GBP") is None


def test_autoretry_for_gives_up_after_max_retries_and_never_retries_other_errors():
    services.fail_next("payments", 10)
    timed_out = tasks.charge_order.delay(7, 2500)
    declined = tasks.charge_order.delay(8, 500_000)
    with pytest.raises(services.PaymentGatewayTimeout):
        timed_out.get(timeout=TIMEOUT)
    with pytest.raises(services.CardDeclined, match="order 8: card declined"):
        declined.get(timeout=TIMEOUT)
    assert Job.objects.get(id=timed_out.id).attempts == 3  # retry_kwargs max_retries=2
    assert Job.objects.get(id=declined.id).attempts == 1
    # retry_kwargs countdown=0.2: a fixed wait.
    assert all(0.1 <= delay <= 0.2 + 1e-6 for delay in retry_delays(timed_out.id))
    services.fail_next("payments", 0)
    assert tasks.charge_order.delay(9, 100).get(timeout=TIMEOUT) == {"order": 9, "charged": 100}


def test_a_soft_time_limit_raises_inside_the_task_which_catches_it():
    started = time.monotonic()
    result = tasks.rebuild_search_index.delay(100)
    outcome = result.get(timeout=TIMEOUT)
    assert outcome["complete"] is False and outcome["indexed"] >= 100
    assert time.monotonic() - started >= 1
    assert Job.objects.get(id=result.id).attempts == 1


def test_a_task_past_its_expiry_is_revoked_without_running(user):
    expired = tasks.send_cart_reminder.apply_async((user.pk,), countdown=2, expires=1)
    on_time = tasks.send_cart_reminder.apply_async((user.pk + 1,), countdown=1, expires=60)
    assert on_time.get(timeout=TIMEOUT) == user.pk + 1
    assert cache.get(f"shop:reminded:{user.pk + 1}") == on_time.id
    with pytest.raises(TaskRevokedError, match="expired"):
        expired.get(timeout=TIMEOUT)
    assert expired.state == "REVOKED" and expired.ready() and not expired.failed()
    assert cache.get(f"shop:reminded:{user.pk}") is None
    job = Job.objects.get(id=expired.id)
    assert job.attempts == 1
    assert job.last_error_class == "queue_app.contrib.celery.exceptions.TaskRevokedError"


def test_the_projects_debug_task_from_celerys_django_guide_runs():
    from tests.celery_compat.mysite.celery import debug_task

    result = debug_task.delay()
    assert result.get(timeout=TIMEOUT) is None and result.successful()


def test_a_task_sent_in_a_transaction_that_rolls_back_never_runs(user):
    """What Celery cannot promise without transaction.on_commit: the job is written in the
    caller's transaction, so a rollback takes it back before any worker sees it."""
    with pytest.raises(RuntimeError), transaction.atomic():
        result = tasks.send_cart_reminder.delay(user.pk)
        raise RuntimeError("the order failed to save")
    assert not Job.objects.filter(id=result.id).exists()
    assert result.state == "PENDING"  # as Celery reads an id it never heard of
