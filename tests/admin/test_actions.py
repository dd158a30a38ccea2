"""Admin actions go through the services (cancel and retry set-based, re-enqueue one job at a
time) and report what they changed."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from queue_app.admin import JobAdmin
from queue_app.models import Job, JobLog, OutboxMessage
from tests.admin.conftest import changelist, make_job

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def run_action(client, action: str, jobs, *, query: str = "", select_across: bool = False):
    response = client.post(
        changelist(query),
        {
            "action": action,
            "_selected_action": [str(job.id) for job in jobs],
            "select_across": "1" if select_across else "0",
            "index": "0",
        },
        follow=True,
    )
    assert response.status_code == 200
    return [str(message) for message in response.context["messages"]]


def status_of(job) -> str:
    return Job.objects.values_list("status", flat=True).get(id=job.id)


def test_cancel_changes_live_jobs_and_skips_finished_ones(admin_client):
    queued, processing, completed = make_job("queued"), make_job("processing"), make_job("completed")
    messages = run_action(admin_client, "cancel_selected", [queued, processing, completed])
    assert messages == [
        "Cancelled 2 jobs.",
        "Skipped 1 job: cannot cancel a job that is completed (1).",
    ]
    # The running job is asked to cancel: cancelling until its worker confirms.
    assert (status_of(queued), status_of(processing), status_of(completed)) == (
        "cancelled",
        "cancelling",
        "completed",
    )
    entry = JobLog.objects.filter(job=queued, event="cancelled").get()
    assert entry.message == "cancelled in the admin by admin"
    removals = OutboxMessage.objects.filter(action="remove").values_list("job_id", flat=True)
    assert set(removals) == {queued.id}  # a running job is in no ready structure


def test_retry_requeues_failed_and_cancelled_jobs(admin_client):
    failed, cancelled, queued = make_job("failed"), make_job("cancelled"), make_job("queued")
    messages = run_action(admin_client, "retry_selected", [failed, cancelled, queued])
    assert messages == ["Retried 2 jobs.", "Skipped 1 job: cannot retry a job that is queued (1)."]
    assert {status_of(failed), status_of(cancelled), status_of(queued)} == {"queued"}
    assert JobLog.objects.filter(job=failed, event="retried").get().message == "retried in the admin by admin"
    enqueued = OutboxMessage.objects.filter(action="enqueue", job__in=[failed, cancelled])
    # One enqueue intent from the original submission, one from the retry.
    assert enqueued.filter(job=failed).count() == 2 and enqueued.filter(job=cancelled).count() == 2
    refreshed = Job.objects.get(id=failed.id)
    assert refreshed.max_attempts >= refreshed.attempts + 1


def test_reenqueue_pushes_queued_jobs_again(admin_client):
    queued, failed = make_job("queued"), make_job("failed")
    before = OutboxMessage.objects.filter(job=queued).count()
    messages = run_action(admin_client, "reenqueue_selected", [queued, failed])
    assert messages == ["Re-enqueued 1 job.", "Skipped 1 job: cannot re-enqueue a job that is failed (1)."]
    assert OutboxMessage.objects.filter(job=queued).count() == before + 1
    assert JobLog.objects.filter(job=queued, event="reenqueued").exists()
    assert status_of(failed) == "failed"


def test_action_on_nothing_applicable_says_so(admin_client):
    completed = make_job("completed")
    messages = run_action(admin_client, "retry_selected", [completed])
    assert messages == ["Retried 0 jobs.", "Skipped 1 job: cannot retry a job that is completed (1)."]


def test_select_across_applies_to_every_job_matching_the_filter(admin_client):
    failed = [make_job("failed") for _ in range(3)]
    completed = make_job("completed")
    messages = run_action(
        admin_client, "retry_selected", failed[:1], query="status__exact=failed", select_across=True
    )
    assert messages == ["Retried 3 jobs."]
    assert {status_of(job) for job in failed} == {"queued"}
    assert status_of(completed) == "completed"


def test_actions_need_change_permission(user_client):
    queued = make_job("queued")
    viewer = user_client("view_job")
    response = viewer.get(changelist())
    assert response.status_code == 200
    assert response.context["action_form"] is None or not [
        name for name, _ in response.context["action_form"].fields["action"].choices if name
    ]
    viewer.post(
        changelist(), {"action": "cancel_selected", "_selected_action": [str(queued.id)], "index": "0"}
    )
    assert status_of(queued) == "queued"

    operator = user_client("view_job", "change_job", username="changer")
    offered = {name for name, _ in operator.get(changelist()).context["action_form"].fields["action"].choices}
    assert {"cancel_selected", "retry_selected", "reenqueue_selected"} <= offered
    assert "delete_selected" not in offered
    assert run_action(operator, "cancel_selected", [queued]) == ["Cancelled 1 job."]
    assert status_of(queued) == "cancelled"


def test_jobs_the_action_cannot_change_are_counted_not_tried_one_by_one(admin_client):
    """Retrying every job of a list of finished ones costs the same few queries however many."""
    completed = make_job("completed")

    def retry_all() -> tuple[int, list[str]]:
        with CaptureQueriesContext(connection) as captured:
            messages = run_action(admin_client, "retry_selected", [completed], select_across=True)
        return len(captured), messages

    make_job("failed")
    few, _ = retry_all()
    make_job("failed")
    for _ in range(4):
        make_job("completed")
    many, messages = retry_all()
    assert messages == [
        "Retried 1 job.",
        "Skipped 6 jobs: cannot retry a job that is completed (5); cannot retry a job that is queued (1).",
    ]
    assert many == few


def test_an_action_on_more_jobs_than_its_limit_changes_none(admin_client, monkeypatch):
    monkeypatch.setattr(JobAdmin, "action_limit", 2)
    failed = [make_job("failed") for _ in range(3)]
    make_job("completed")
    messages = run_action(admin_client, "retry_selected", failed[:1], select_across=True)
    assert messages == [
        "Nothing retried: 3 of the selected jobs can be retried, more than the 2 one action may change."
        " Narrow the list (status, type, queue, dates) or retry them through the API"
        " (POST /api/jobs/{id}/retry/) or retry_job()."
    ]
    assert {status_of(job) for job in failed} == {"failed"}
    # Within the limit, the same action goes through.
    assert run_action(admin_client, "retry_selected", failed[:2]) == ["Retried 2 jobs."]


def _failed_jobs(count: int) -> list[Job]:
    """``count`` jobs that used their one attempt and failed, made in one statement."""
    return Job.objects.bulk_create(
        Job(type="demo.echo", status="failed", attempts=1, fence=1, max_attempts=1) for _ in range(count)
    )


@pytest.mark.parametrize(
    ("action", "verb"), [("cancel_selected", "Cancelled"), ("retry_selected", "Retried")]
)
def test_cancel_and_retry_of_a_selection_cost_the_same_queries_for_any_number_of_jobs(
    admin_client, action, verb
):
    """One conditional UPDATE, one insert of log rows and one of outbox rows for the whole
    selection: a selection of 995 jobs took 7.5 s one job at a time."""
    status = "queued" if action == "cancel_selected" else "failed"

    def run(count: int) -> int:
        jobs = Job.objects.bulk_create(
            Job(type="demo.echo", status=status, attempts=1, fence=1, max_attempts=3) for _ in range(count)
        )
        with CaptureQueriesContext(connection) as captured:
            assert run_action(admin_client, action, jobs) == [
                f"{verb} {count} {'job' if count == 1 else 'jobs'}."
            ]
        ids = [job.id for job in jobs]
        assert JobLog.objects.filter(job_id__in=ids).count() == count
        assert OutboxMessage.objects.filter(job_id__in=ids).count() == count
        return len(captured)

    assert run(3) == run(300)


def post_as_a_browser(user, form: dict):
    """The list's form as a browser sends it: urlencoded, with the CSRF check on (as in
    production, where that check reads the form first)."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.get(changelist())
    form = {**form, "csrfmiddlewaretoken": client.cookies["csrftoken"].value, "index": "0"}
    return client.post(
        changelist(),
        urlencode(form, doseq=True),
        content_type="application/x-www-form-urlencoded",
        follow=True,
    )


def test_a_selection_of_the_documented_1000_jobs_is_retried(admin_user):
    """1,000 ticked jobs are 1,000 form fields: past DATA_UPLOAD_MAX_NUMBER_FIELDS, Django
    answered the action with a 400 page before it ran."""
    jobs = _failed_jobs(JobAdmin.action_limit)
    response = post_as_a_browser(
        admin_user, {"action": "retry_selected", "_selected_action": [str(job.id) for job in jobs]}
    )
    assert response.status_code == 200
    assert [str(message) for message in response.context["messages"]][0] == "Retried 1000 jobs."
    ids = [job.id for job in jobs]
    assert Job.objects.filter(id__in=ids, status="queued").count() == 1000
    assert JobLog.objects.filter(job_id__in=ids, event="retried").count() == 1000
    assert OutboxMessage.objects.filter(job_id__in=ids, action="enqueue").count() == 1000


def test_a_selection_beyond_the_limit_changes_none_and_says_so(admin_user):
    jobs = _failed_jobs(JobAdmin.action_limit + 1)
    response = post_as_a_browser(
        admin_user, {"action": "retry_selected", "_selected_action": [str(job.id) for job in jobs]}
    )
    assert response.status_code == 200
    [message] = [str(message) for message in response.context["messages"]]
    assert message.startswith("Nothing retried: 1001 of the selected jobs can be retried, more than the 1000")
    assert not Job.objects.exclude(status="failed").exists()


def test_a_post_elsewhere_keeps_djangos_field_limit(admin_client, settings):
    """Only the job list's actions read a form of any size."""
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 10
    admin_client.raise_request_exception = False
    response = admin_client.post(
        "/admin/auth/user/",
        urlencode({"_selected_action": [str(n) for n in range(20)]}, doseq=True),
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 400


def test_a_retry_that_raises_max_attempts_says_so(admin_client):
    """A job that used every attempt runs again only because its max_attempts rises (attempts
    are never reset): the message says for how many jobs, and each job's log row records it."""
    used_up = _failed_jobs(2)
    with_attempts_left = make_job("cancelled")
    messages = run_action(admin_client, "retry_selected", [*used_up, with_attempts_left])
    assert messages == [
        "Retried 3 jobs.",
        "Max attempts raised for 2 of them: they had used every attempt, so max_attempts rose to one"
        " more than their attempts to allow this run. Attempts are never reset (they number the"
        " job's attempts in its log); each job's log records its max_attempts before and after.",
    ]
    extra = JobLog.objects.get(job_id=used_up[0].id, event="retried").extra
    assert extra == {"max_attempts_before": 1, "max_attempts": 2}
