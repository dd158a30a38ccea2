"""The admin's queue list: every configured queue, pause/resume actions, limits edited in the list."""

import html
import re

import pytest
from django.urls import reverse

from queue_app import services
from queue_app.models import QueueState

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

CHANGELIST = reverse("admin:queue_app_queuestate_changelist")


def edit_limits(client, rows):
    """Save the list's editable columns: rows = [(name, concurrency_limit, rate_limit)]."""
    data = {
        "form-TOTAL_FORMS": str(len(rows)),
        "form-INITIAL_FORMS": str(len(rows)),
        "_save": "Save",
    }
    for index, (name, concurrency, rate) in enumerate(rows):
        data[f"form-{index}-name"] = name
        data[f"form-{index}-concurrency_limit"] = concurrency
        data[f"form-{index}-rate_limit"] = rate
    return client.post(CHANGELIST, data)


def test_the_list_shows_every_configured_queue(admin_client, queues):
    response = admin_client.get(CHANGELIST)
    assert response.status_code == 200
    assert set(QueueState.objects.values_list("name", flat=True)) == {"default", "emails", "reports"}
    assert b"FIFO" in response.content


def test_pause_and_resume_actions(admin_client, queues):
    admin_client.get(CHANGELIST)
    response = admin_client.post(
        CHANGELIST, {"action": "pause_selected", "_selected_action": ["default", "emails"]}, follow=True
    )
    assert b"2 queue(s) paused." in response.content
    assert set(QueueState.objects.filter(paused=True).values_list("name", flat=True)) == {"default", "emails"}
    admin_client.post(CHANGELIST, {"action": "resume_selected", "_selected_action": ["emails"]})
    assert set(QueueState.objects.filter(paused=True).values_list("name", flat=True)) == {"default"}


def test_limits_are_edited_in_the_list(admin_client, queues):
    admin_client.get(CHANGELIST)
    response = edit_limits(admin_client, [("default", "2", "1.5"), ("emails", "", ""), ("reports", "", "3")])
    assert response.status_code == 302, response.content.decode()[:2000]
    limits = dict(
        (name, (c, r))
        for name, c, r in QueueState.objects.values_list("name", "concurrency_limit", "rate_limit")
    )
    assert limits == {"default": (2, 1.5), "emails": (None, None), "reports": (None, 3.0)}


def test_a_limit_of_zero_is_refused_and_nothing_changes(admin_client, queues):
    admin_client.get(CHANGELIST)
    response = edit_limits(admin_client, [("default", "0", ""), ("emails", "", ""), ("reports", "", "")])
    assert response.status_code == 200  # the list again, with the error
    assert QueueState.objects.get(name="default").concurrency_limit is None


def test_actions_need_change_permission(user_client, queues):
    QueueState.objects.create(name="default")
    client = user_client("view_queuestate")
    response = client.post(CHANGELIST, {"action": "pause_selected", "_selected_action": ["default"]})
    assert not QueueState.objects.get(name="default").paused
    assert response.status_code in (200, 302, 403)


@pytest.mark.parametrize(
    ("concurrency", "rate"),
    [("2000000", ""), ("", "1e12"), ("", "1000000.5")],
)
def test_a_limit_past_what_the_service_takes_is_a_form_error(admin_client, queues, concurrency, rate):
    admin_client.get(CHANGELIST)
    response = edit_limits(
        admin_client, [("default", concurrency, rate), ("emails", "", ""), ("reports", "", "")]
    )
    assert response.status_code == 200  # the list again, with the error
    assert response.context["cl"].formset.errors[0]
    assert QueueState.objects.filter(concurrency_limit=None, rate_limit=None).count() == 3


def test_a_queue_no_longer_configured_is_read_only(admin_client, queues):
    QueueState.objects.create(name="gone", concurrency_limit=3)
    response = admin_client.get(CHANGELIST)
    gone = next(form for form in response.context["cl"].formset if form.instance.name == "gone")
    assert all(gone.fields[name].disabled for name in ("concurrency_limit", "rate_limit"))
    response = edit_limits(
        admin_client, [("default", "2", ""), ("emails", "", ""), ("gone", "5", "7"), ("reports", "", "")]
    )
    assert response.status_code == 302
    assert QueueState.objects.values_list("concurrency_limit", "rate_limit").get(name="gone") == (3, None)
    assert QueueState.objects.get(name="default").concurrency_limit == 2
    detail = admin_client.get(reverse("admin:queue_app_queuestate_change", args=["gone"]))
    assert detail.context["adminform"].form.fields["rate_limit"].disabled


def page_inputs(page: str) -> dict[str, str]:
    """The inputs of a page's form as a browser posts them (checkboxes left unticked)."""
    data = {}
    for tag in re.findall(r"<input\b[^>]*>", page):
        name, value = re.search(r'name="([^"]*)"', tag), re.search(r'value="([^"]*)"', tag)
        if name and 'type="checkbox"' not in tag:
            data[name.group(1)] = html.unescape(value.group(1)) if value else ""
    return data


def test_editing_one_limit_leaves_the_other_as_changed_since_the_page_opened(admin_client, queues):
    services.set_queue_limits("emails", rate_limit=5.0)
    page = page_inputs(admin_client.get(CHANGELIST).content.decode())  # shows a rate of 5
    services.set_queue_limits("emails", rate_limit=1.0)  # meanwhile, through the API
    QueueState.objects.filter(name="emails").update(rate_tokens=0.5)  # part of the bucket spent
    (row,) = [key.split("-")[1] for key, value in page.items() if key.endswith("-name") and value == "emails"]
    page[f"form-{row}-concurrency_limit"] = "4"
    response = admin_client.post(CHANGELIST, {**page, "_save": "Save"})
    assert response.status_code == 302
    emails = QueueState.objects.get(name="emails")
    # The rate set since stays, and its bucket is not refilled.
    assert (emails.concurrency_limit, emails.rate_limit, emails.rate_tokens) == (4, 1.0, 0.5)


@pytest.mark.parametrize("rate", ["0", "-1", "0.0"])
def test_a_rate_limit_of_zero_or_less_is_a_field_error_in_words(admin_client, queues, rate):
    """The table's check constraint refused it, and the form showed its raw name
    ('Constraint “ck_job_queues_rate_limit” is violated.') above the list."""
    admin_client.get(CHANGELIST)
    response = edit_limits(admin_client, [("default", "", rate), ("emails", "", ""), ("reports", "", "")])
    assert response.status_code == 200  # the list again, with the error
    form = response.context["cl"].formset.forms[0]
    assert form.errors == {
        "rate_limit": ["Must be a number of jobs per second above 0 (leave it empty for no limit)."]
    }
    assert "ck_job_queues" not in response.content.decode()
    assert QueueState.objects.filter(rate_limit=None).count() == 3


def test_a_rate_limit_of_zero_on_the_queue_page_is_a_field_error_in_words(admin_client, queues):
    admin_client.get(CHANGELIST)
    url = reverse("admin:queue_app_queuestate_change", args=["default"])
    response = admin_client.post(url, {"concurrency_limit": "", "rate_limit": "0"})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "rate_limit": ["Must be a number of jobs per second above 0 (leave it empty for no limit)."]
    }
    assert "ck_job_queues" not in response.content.decode()
