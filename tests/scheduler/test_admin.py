"""The admin lists declared schedules with their last and next tick, and pauses and resumes them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from queue_app.models import Job, ScheduleState
from queue_app.runtime.scheduler import Scheduler, database_now
from queue_app.schedules import all_schedules

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:queue_app_schedulestate_changelist")


@pytest.fixture(autouse=True)
def declared(settings):
    settings.JOBQUEUE = {
        "SCHEDULES": {
            "nightly": {"type": "demo.echo", "cron": "0 3 * * *", "timezone": "Europe/Paris"},
            "pulse": {"type": "demo.echo", "cron": "@every 30s"},
        }
    }


def test_the_list_shows_every_declared_schedule_even_before_a_scheduler_ran(admin_client):
    response = admin_client.get(CHANGELIST)
    assert response.status_code == 200
    body = response.content.decode()
    assert "nightly" in body and "<code>0 3 * * *</code>" in body and "Europe/Paris" in body
    assert "pulse" in body and "@every 30s" in body
    assert ScheduleState.objects.get(name="nightly").next_tick_at is not None


def test_a_schedule_without_ticks_leaves_the_list_working(admin_client, settings):
    settings.JOBQUEUE = {"SCHEDULES": {"feb30": {"type": "demo.echo", "cron": "0 0 30 2 *"}}}
    assert admin_client.get(CHANGELIST).status_code == 200


def test_pause_and_resume_actions(admin_client):
    admin_client.get(CHANGELIST)

    def act(action):
        response = admin_client.post(
            CHANGELIST, {"action": action, "_selected_action": ["nightly"], "index": "0"}, follow=True
        )
        return [str(message) for message in response.context["messages"]]

    assert act("pause_selected") == ["1 schedule(s) paused."]
    assert ScheduleState.objects.get(name="nightly").paused
    assert not ScheduleState.objects.get(name="pulse").paused
    assert act("resume_selected") == ["1 schedule(s) resumed."]
    assert not ScheduleState.objects.get(name="nightly").paused


def test_resuming_does_not_run_a_tick_that_fell_while_paused(admin_client):
    admin_client.get(CHANGELIST)
    (nightly,) = [schedule for schedule in all_schedules() if schedule.name == "nightly"]

    def act(action):
        admin_client.post(CHANGELIST, {"action": action, "_selected_action": ["nightly"], "index": "0"})

    act("pause_selected")
    # A day passes with no scheduler running, so none passed over the paused tick.
    latest = nightly.latest_tick(database_now())
    ScheduleState.objects.filter(name="nightly").update(last_tick_at=latest - timedelta(days=1))
    act("resume_selected")
    Scheduler([nightly]).run_once()
    assert not Job.objects.filter(idempotency_key__startswith="schedule:nightly:").exists()
    assert ScheduleState.objects.get(name="nightly").last_tick_at == latest


def test_a_user_without_change_permission_cannot_pause(client, django_user_model):
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_schedulestate"))
    client.force_login(viewer)
    assert client.get(CHANGELIST).status_code == 200
    client.post(CHANGELIST, {"action": "pause_selected", "_selected_action": ["nightly"], "index": "0"})
    assert not ScheduleState.objects.get(name="nightly").paused


def test_a_schedule_row_is_read_only_and_cannot_be_deleted(admin_client):
    """A hand-edited definition would make the scheduler take the schedule as redefined (and
    skip its due tick); a deleted row would come back unpaused."""
    admin_client.get(CHANGELIST)
    before = ScheduleState.objects.values().get(name="nightly")
    change = reverse("admin:queue_app_schedulestate_change", args=["nightly"])
    assert admin_client.get(change).status_code == 200  # to read
    response = admin_client.post(change, {"definition": "tampered", "paused": "on", "_save": "Save"})
    assert response.status_code == 403
    choices = admin_client.get(CHANGELIST).context["action_form"].fields["action"].choices
    assert {name for name, _ in choices} == {"", "pause_selected", "resume_selected"}
    deletion = {"action": "delete_selected", "_selected_action": ["nightly"], "post": "yes", "index": "0"}
    admin_client.post(CHANGELIST, deletion)
    delete = reverse("admin:queue_app_schedulestate_delete", args=["nightly"])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert ScheduleState.objects.values().get(name="nightly") == before
