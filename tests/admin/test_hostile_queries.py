"""Every admin list answers any query string with 200 or Django's ``?e=1`` redirect, never a 500.

The hostile values are the ones a probe sent: a NUL byte (PostgreSQL text
cannot hold one), out-of-range dates for the drill-down, numbers past any
integer column, and junk. Django's own contract for a bad lookup is the
redirect to ``?e=1`` (``IncorrectLookupParameters`` in
django/contrib/admin/views/main.py, tested in Django's admin_changelist tests).
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.db.models import DateField
from django.http import Http404
from django.test import RequestFactory
from django.urls import reverse
from rest_framework.authtoken.models import Token

from queue_app.engine.counts import count_rows, estimated_count
from queue_app.models import Job, QueueState, ScheduleState
from tests.admin.conftest import make_job

pytestmark = [pytest.mark.django_db, pytest.mark.redis]

HOSTILE_VALUES = ["\x00", "a\x00b", "32", "-1", "0", "9999", "99999999999999999999", "x", "%", "1e400"]


def admin_lists():
    registry = admin.site._registry
    return [model_admin for model, model_admin in registry.items() if model._meta.app_label == "queue_app"]


def filter_parameters(model_admin) -> list[str]:
    """Every query parameter a list filter of ``model_admin`` reads, and the date drill-down's."""
    names: set[str] = set()
    for spec in model_admin.list_filter:
        if isinstance(spec, type):
            names.add(spec.parameter_name)
        else:
            field = spec[0] if isinstance(spec, tuple) else spec
            names.update(_field_filter_parameters(model_admin, field, spec))
    if model_admin.date_hierarchy:
        field = model_admin.date_hierarchy
        names.update(f"{field}__{part}" for part in ("year", "month", "day"))
    # Search, ordering and page: read by every list.
    return sorted(names | {"q", "o", "p"})


def _field_filter_parameters(model_admin, field_name, spec) -> set[str]:
    field = model_admin.model._meta.get_field(field_name)
    filter_class = spec[1] if isinstance(spec, tuple) else admin.FieldListFilter.create
    request = RequestFactory().get("/")
    instance = filter_class(field, request, {}, model_admin.model, model_admin, field_name)
    return set(instance.expected_parameters())


CASES = [
    (model_admin.model._meta.model_name, parameter, value)
    for model_admin in admin_lists()
    for parameter in filter_parameters(model_admin)
    for value in HOSTILE_VALUES
]


@pytest.mark.parametrize(("model", "parameter", "value"), CASES)
def test_every_filter_answers_200_or_the_error_redirect(admin_client, model, parameter, value):
    make_job("failed")
    url = reverse(f"admin:queue_app_{model}_changelist")
    response = admin_client.get(url, {parameter: value})
    assert response.status_code == 200 or (  # noqa: PT018
        response.status_code == 302 and response["Location"].endswith("?e=1")
    ), (response.status_code, parameter, value)


@pytest.mark.parametrize(
    "query",
    [
        {"created_at__year": "2024", "created_at__month": "2", "created_at__day": "30"},
        {"created_at__year": "9999", "created_at__month": "12"},
        {"created_at__year": "0"},
        {"created_at__year": "2024", "created_at__month": "13"},
        {"created_at__month": "1", "created_at__day": "1"},
    ],
)
def test_date_drill_down_outside_the_calendar_is_the_error_redirect(admin_client, query):
    make_job("failed")
    response = admin_client.get(reverse("admin:queue_app_job_changelist"), query)
    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")


def test_a_valid_drill_down_still_lists_the_day(admin_client):
    job = make_job("failed")
    day = job.created_at.astimezone()
    query = {"created_at__year": day.year, "created_at__month": day.month, "created_at__day": day.day}
    response = admin_client.get(reverse("admin:queue_app_job_changelist"), query)
    assert response.status_code == 200
    assert [row.pk for row in response.context["cl"].result_list] == [job.pk]


def test_estimated_count_of_a_filter_that_matches_nothing_is_zero():
    """Django runs no EXPLAIN for ``id__in=[]`` and returns an empty plan."""
    assert estimated_count(Job.objects.filter(id__in=[])) == 0
    assert count_rows(Job.objects.filter(id__in=[])) == (0, False)


UNDECLARED = [
    ("job", {"id__regex": "["}),  # PostgreSQL: invalid regular expression
    ("job", {"started_at__year": "99999999999999999999"}),  # OverflowError
    ("job", {"type__range": "x"}),  # IndexError
    ("job", {"payload__icontains": "zzz"}),  # no 500, but a scan of every payload
    ("joblog", {"created_at__year": "0"}),
    ("joblog", {"message__iregex": "["}),
    ("outboxmessage", {"created_at__year": "0"}),
    ("schedulestate", {"created_at__year": "0"}),
    ("queuestate", {"updated_at__year": "0"}),
    ("queuestate", {"name__iregex": "["}),
]


@pytest.mark.parametrize(("model", "query"), UNDECLARED)
def test_a_lookup_no_filter_declares_is_refused_before_any_query(admin_client, model, query):
    """Only the lists' own filter, drill-down and search parameters reach the query; Django
    answers any other field lookup with 400 (DisallowedModelAdminLookup)."""
    make_job("failed")
    response = admin_client.get(reverse(f"admin:queue_app_{model}_changelist"), query)
    assert response.status_code == 400, (model, query)


# --- every admin the site has, whichever app registered it ---------------------------------


def every_admin():
    """Each ModelAdmin on the project's site: the project's own, django.contrib.auth's, DRF's tokens."""
    return sorted(admin.site._registry.values(), key=lambda model_admin: model_admin.opts.label)


def field_lookups_that_fail_in_the_database(model) -> list[dict[str, str]]:
    """Lookups Django's ``lookup_allowed`` lets through on a local field and that fail only as the
    query runs: an invalid regular expression, a NUL byte, a year past the calendar."""
    fields = model._meta.concrete_fields
    queries = [{f"{field.attname}__regex": "["} for field in fields]
    queries += [
        {f"{field.name}__year": "99999999999999999999"} for field in fields if isinstance(field, DateField)
    ]
    return [*queries, {fields[0].attname: "a\x00b"}]


@pytest.fixture
def a_row_in_every_table(admin_user):
    """PostgreSQL compiles a regular expression at its first row: every list needs one."""
    make_job("failed")
    Group.objects.create(name="operators")
    Token.objects.create(user=admin_user)
    ScheduleState.objects.create(name="nightly")


ANY_LIST_CASES = [
    pytest.param(model_admin.opts, query, id=f"{model_admin.opts.label}-{next(iter(query))}")
    for model_admin in every_admin()
    for query in field_lookups_that_fail_in_the_database(model_admin.model)
]


@pytest.mark.usefixtures("a_row_in_every_table")
@pytest.mark.parametrize(("opts", "query"), ANY_LIST_CASES)
def test_no_lookup_on_any_admin_list_is_a_500(admin_client, opts, query):
    """Django's answer to a bad lookup is the redirect to ``?e=1`` (IncorrectLookupParameters);
    the project's own lists refuse undeclared lookups with a 400 first."""
    response = admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"), query)
    assert response.status_code in (200, 302, 400), (response.status_code, query)
    if response.status_code == 302:
        assert response["Location"].endswith("?e=1")


@pytest.mark.usefixtures("a_row_in_every_table")
def test_an_invalid_regex_on_the_user_list_is_an_ignored_filter(admin_client, admin_user):
    """The probe's finding: ``/admin/auth/user/?id__regex=[`` was a 500 (PostgreSQL: invalid
    regular expression). It is Django's redirect to the unfiltered list, which still answers."""
    url = reverse("admin:auth_user_changelist")
    response = admin_client.get(url, {"id__regex": "["})
    assert response.status_code == 302
    assert response["Location"] == f"{url}?e=1"
    listed = admin_client.get(response["Location"])
    assert listed.status_code == 200
    assert [user.pk for user in listed.context["cl"].result_list] == [admin_user.pk]


@pytest.mark.usefixtures("a_row_in_every_table")
@pytest.mark.parametrize("page", ["change", "history", "delete"])
@pytest.mark.parametrize("opts", [model_admin.opts for model_admin in every_admin()], ids=str)
def test_a_nul_byte_in_an_object_id_is_a_404_on_every_admin_page(admin_client, opts, page):
    """The queue-state page answered 500 (its key is text, so the NUL reached PostgreSQL)."""
    base = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    response = admin_client.get(f"{base}a%00b/{page}/")
    assert response.status_code == 404


def test_a_nul_byte_in_the_view_on_site_address_is_a_404(admin_client):
    queue_state = ContentType.objects.get_for_model(QueueState)
    response = admin_client.get(f"/admin/r/{queue_state.pk}/a%00b/")
    assert response.status_code == 404


def test_the_queue_state_admin_refuses_a_nul_id_on_any_site():
    """queue_app's own admins carry the guard themselves, for a host project with Django's site."""
    model_admin = admin.site.get_model_admin(QueueState)
    with pytest.raises(Http404):
        model_admin.get_object(RequestFactory().get("/"), "a\x00b")


@pytest.mark.usefixtures("a_row_in_every_table")
@pytest.mark.parametrize(
    ("app_label", "model_name", "field_name"),
    [("auth", "user", "groups"), ("queue_app", "job", "owner"), ("queue_app", "joblog", "job")],
)
def test_a_nul_byte_in_an_autocomplete_term_finds_nothing(admin_client, app_label, model_name, field_name):
    response = admin_client.get(
        reverse("admin:autocomplete"),
        {"term": "a\x00b", "app_label": app_label, "model_name": model_name, "field_name": field_name},
    )
    assert response.status_code == 200
    assert response.json()["results"] == []
