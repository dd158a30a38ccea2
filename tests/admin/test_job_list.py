"""The job list: columns, filters, search, date hierarchy, and the queries behind them."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from queue_app import services
from queue_app.handlers import registered_types
from queue_app.ids import uuid7
from queue_app.models import Job
from tests.admin.conftest import changelist, listed_ids, make_job

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def job_queries(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if '"queue_app_jobs"' in q["sql"]]


def cell(html: str, column: str) -> str:
    """The inner HTML of the first row's cell of ``column``."""
    return re.search(rf'<(?:td|th) class="field-{column}"[^>]*>(.*?)</(?:td|th)>', html, re.S).group(1)


def test_columns_show_id_badge_attempts_duration_and_error_excerpt(admin_client):
    long_error = "ValueError: " + "x" * 200 + "\nTraceback line two"
    failed = make_job("failed", type="demo.fail", queue="default", priority="high", error=long_error)
    response = admin_client.get(changelist())
    html = response.content.decode()
    assert listed_ids(response) == {str(failed.id)}
    assert f'<code title="{failed.id}">…{str(failed.id)[-8:]}</code>' in cell(html, "short_id")
    assert cell(html, "job_type") == "demo.fail"
    assert cell(html, "queue") == "default"
    assert cell(html, "status_badge") == '<span class="job-status job-status-failed">failed</span>'
    assert cell(html, "priority") == "High"
    assert cell(html, "attempts_of_max") == "1/3"
    assert cell(html, "duration").endswith((" ms", " s"))
    # The excerpt is the first line, cut short; the whole error is in its title.
    excerpt = cell(html, "error_excerpt")
    assert ">ValueError: xxx" in excerpt and excerpt.endswith("…</span>")
    assert "Traceback line two" in excerpt.split(">", 1)[0]
    assert "Traceback line two<" not in excerpt


def test_status_filter_lists_only_that_status(admin_client):
    jobs = {
        status: make_job(status)
        for status in ("queued", "processing", "completed", "failed", "cancelled", "expired")
    }
    for status, job in jobs.items():
        assert listed_ids(admin_client.get(changelist(f"status__exact={status}"))) == {str(job.id)}


def test_type_filter_offers_registered_types_without_reading_the_table(admin_client):
    echo, fail = make_job(type="demo.echo"), make_job(type="demo.fail")
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(changelist())
    choices = {
        choice["display"]
        for spec in response.context["cl"].filter_specs
        if spec.title == "type"
        for choice in spec.choices(response.context["cl"])
    }
    assert set(registered_types()) <= choices
    assert not [sql for sql in job_queries(captured) if "DISTINCT" in sql.upper()]
    assert listed_ids(admin_client.get(changelist("type=demo.fail"))) == {str(fail.id)}
    assert listed_ids(admin_client.get(changelist("type=demo.echo"))) == {str(echo.id)}


def test_queue_priority_and_created_filters(admin_client, queues):
    emails = make_job(queue="emails", priority="low")
    reports = make_job(queue="reports", priority="high")
    old = make_job(queue="default")
    Job.objects.filter(id=old.id).update(created_at=timezone.now() - timedelta(days=40))
    assert listed_ids(admin_client.get(changelist("queue=emails"))) == {str(emails.id)}
    assert listed_ids(admin_client.get(changelist("priority__exact=high"))) == {str(reports.id)}
    cl = admin_client.get(changelist()).context["cl"]
    (past_week,) = [
        choice["query_string"]
        for spec in cl.filter_specs
        if spec.title == "created at"
        for choice in spec.choices(cl)
        if choice["display"] == "Past 7 days"
    ]
    assert listed_ids(admin_client.get(changelist() + past_week)) == {str(emails.id), str(reports.id)}


def test_search_by_full_id_is_an_exact_primary_key_lookup(admin_client):
    wanted, other = make_job(), make_job()
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(changelist(f"q={wanted.id}"))
    assert listed_ids(response) == {str(wanted.id)}
    assert str(other.id) not in response.content.decode()
    page_query = [sql for sql in job_queries(captured) if "ORDER BY" in sql][-1]
    assert f'"queue_app_jobs"."id" IN (\'{wanted.id.hex}\'::uuid)' in page_query
    assert "LIKE" not in page_query and "::text" not in page_query


def test_search_by_short_id_is_a_primary_key_range(admin_client):
    wanted, other = make_job(), make_job()
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(changelist(f"q={str(wanted.id)[:8]}"))
    assert str(wanted.id) in listed_ids(response)
    if str(other.id)[:8] != str(wanted.id)[:8]:
        assert str(other.id) not in listed_ids(response)
    page_query = [sql for sql in job_queries(captured) if "ORDER BY" in sql][-1]
    assert '"queue_app_jobs"."id" BETWEEN' in page_query and "LIKE" not in page_query


def test_jobs_of_one_minute_show_short_ids_that_differ(admin_client):
    """UUIDv7 ids of one minute share their first 8 digits; the list shows their tails."""
    jobs = [make_job() for _ in range(20)]
    assert len({str(job.id)[:8] for job in jobs}) < 20  # what the first digits would show
    html = admin_client.get(changelist()).content.decode()
    shown = re.findall(r'<code title="[^"]+">…([0-9a-f]{8})</code>', html)
    assert sorted(shown) == sorted(str(job.id)[-8:] for job in jobs)


@pytest.mark.parametrize("typed", ["{tail}", "…{tail}", "...{tail}", "{middle}"])
def test_search_by_the_short_id_shown_or_any_eight_digits_of_an_id(admin_client, typed):
    wanted, _other = make_job(), make_job()  # the other one is not listed
    hex_id = wanted.id.hex
    term = typed.format(tail=str(wanted.id)[-8:], middle=hex_id[10:20])
    assert listed_ids(admin_client.get(changelist(f"q={quote(term)}"))) == {str(wanted.id)}


def test_search_by_digits_of_an_id_that_are_all_decimal_digits(admin_client):
    """Such a term could be a number in an error too; an id holding it is still found."""
    wanted = Job.objects.create(id="01a24cb6-2340-7155-9964-502345678901", type="demo.echo", max_attempts=1)
    make_job()  # not listed
    for term in ("4071559964", "45678901"):  # from its middle; the tail the list shows
        assert listed_ids(admin_client.get(changelist(f"q={term}"))) == {str(wanted.id)}


@pytest.mark.parametrize("typed", ["{tail}", "…{tail}", "{tail12}"])
def test_search_by_the_tail_shown_probes_the_tail_index_not_every_ids_text(admin_client, typed):
    """The shown tail was a match of every id's text: 13.7 s over 5,000,000 jobs."""
    wanted, other = make_job(), make_job()
    term = typed.format(tail=str(wanted.id)[-8:], tail12=str(wanted.id)[-12:])
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(changelist(f"q={quote(term)}"))
    assert listed_ids(response) == {str(wanted.id)}
    page_query = [sql for sql in job_queries(captured) if "ORDER BY" in sql][-1]
    assert f'RIGHT(("queue_app_jobs"."id")::text, 8) = \'{str(wanted.id)[-8:]}\'' in page_query
    digits = term.lstrip("…")
    assert f"'%{digits}%'" not in page_query  # not the match anywhere in every id's text
    # Its plan probes idx_jobs_time_id_tail: the expressions are the index's, character for character.
    # Over two jobs a walk of idx_jobs_created_at in the list's order, filtering each, can cost
    # least (as the statistics other tests left say); with plain index scans off only the
    # indexes the search's conditions match can be read.
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute(f"EXPLAIN {page_query}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "idx_jobs_time_id_tail" in plan, plan
    # An id holding the digits elsewhere than at its end is not a tail match.
    assert str(other.id) not in listed_ids(response)


def test_search_by_the_tail_finds_a_job_made_weeks_ago_through_its_time_span(admin_client):
    """The probe covers each span from the oldest job on, not only the spans of recent ids."""
    made_at = timezone.now() - timedelta(days=30)
    old = Job.objects.create(
        id=uuid7(int(made_at.timestamp() * 1000), 0x123, 0x0ABC_DEF0_ABCD_EF12),
        type="demo.echo",
        max_attempts=1,
    )
    Job.objects.filter(pk=old.pk).update(created_at=made_at)
    make_job()  # a recent one, not listed
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(changelist(f"q={str(old.id)[-8:]}"))
    assert listed_ids(response) == {str(old.id)}
    page_query = [sql for sql in job_queries(captured) if "ORDER BY" in sql][-1]
    assert f"'{str(old.id)[:6]}'" in page_query  # its span is among those probed
    assert f"'%{str(old.id)[-8:]}%'" not in page_query  # found by the probe, not the text scan


def test_search_several_full_ids(admin_client):
    first, second, third = make_job(), make_job(), make_job()
    response = admin_client.get(changelist(f"q={first.id}, {third.id}"))
    assert listed_ids(response) == {str(first.id), str(third.id)}
    assert str(second.id) not in listed_ids(response)


def test_search_by_idempotency_key_and_type(admin_client):
    keyed = make_job(idempotency_key="invoice-42")
    failing = make_job("failed", type="demo.fail", error="nothing in common")
    make_job(type="demo.echo")
    assert listed_ids(admin_client.get(changelist("q=invoice-42"))) == {str(keyed.id)}
    # A word of a registered type name finds that type's jobs (an indexed IN list).
    assert listed_ids(admin_client.get(changelist("q=fail"))) == {str(failing.id)}


def test_search_by_unique_key_and_the_key_on_the_job_page(admin_client):
    unique = services.enqueue_job("demo.echo", unique_key="nightly-report")
    make_job(idempotency_key="other")
    assert listed_ids(admin_client.get(changelist("q=nightly-report"))) == {str(unique.id)}
    page = admin_client.get(reverse("admin:queue_app_job_change", args=[unique.id])).content.decode()
    assert "Unique key" in page and "nightly-report" in page


def test_search_error_words_in_their_order(admin_client):
    timed_out = make_job("failed", error="RuntimeError: upstream service timed out after 30 s")
    refused = make_job("failed", error="ConnectionError: connection refused")
    assert listed_ids(admin_client.get(changelist("q=upstream timed"))) == {str(timed_out.id)}
    assert listed_ids(admin_client.get(changelist("q=UPSTREAM"))) == {str(timed_out.id)}
    assert listed_ids(admin_client.get(changelist("q=refused"))) == {str(refused.id)}
    assert listed_ids(admin_client.get(changelist("q=timed upstream"))) == set()


def test_search_treats_like_wildcards_as_text(admin_client):
    percent = make_job("failed", error="disk 100% full")
    make_job("failed", error="disk is fine")
    assert listed_ids(admin_client.get(changelist("q=%25"))) == {str(percent.id)}
    assert listed_ids(admin_client.get(changelist("q=_"))) == set()


def test_no_page_counts_the_whole_table(admin_client):
    for status in ("queued", "failed", "completed"):
        make_job(status)
    for query in ("", "status__exact=failed", "q=boom", "type=demo.echo"):
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(changelist(query)).status_code == 200
        counts = [sql for sql in job_queries(captured) if "COUNT(" in sql.upper()]
        # Every count is capped: a LIMIT inside the counted subquery.
        assert counts and all("LIMIT" in sql for sql in counts), counts


def test_date_hierarchy_reads_only_the_first_and_last_dates(admin_client):
    recent = make_job()
    older = make_job()
    last_year = timezone.now() - timedelta(days=400)
    Job.objects.filter(id=older.id).update(created_at=last_year)
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(changelist())
    html = response.content.decode()
    assert f"created_at__year={last_year.year}" in html
    assert f"created_at__year={timezone.now().year}" in html
    assert not [
        sql for sql in job_queries(captured) if "DATE_TRUNC" in sql.upper() or "DISTINCT" in sql.upper()
    ]
    # Drilling down to a year lists its months, and the list narrows to that year.
    response = admin_client.get(changelist(f"created_at__year={last_year.year}"))
    assert f"created_at__month={last_year.month}" in response.content.decode()
    assert listed_ids(response) == {str(older.id)}
    assert str(recent.id) not in listed_ids(response)


def test_detail_is_read_only_and_shows_the_log_trail(admin_client):
    job = make_job("failed", error="RuntimeError: the trail ends here")
    url = f"/admin/queue_app/job/{job.id}/change/"
    response = admin_client.get(url)
    html = response.content.decode()
    assert response.status_code == 200
    for event in ("enqueued", "claimed", "failed"):
        assert f"<p>{event}</p>" in html or f">{event}<" in html, event
    assert "the trail ends here" in html
    assert 'name="_save"' not in html and "<textarea" not in html
    # Nothing can be written through the form, not even by a superuser.
    assert admin_client.post(url, {"status": "completed"}).status_code == 403
    assert Job.objects.get(id=job.id).status == "failed"


def test_jobs_cannot_be_added_or_deleted_in_the_admin(admin_client):
    job = make_job()
    assert admin_client.get("/admin/queue_app/job/add/").status_code == 403
    assert admin_client.post(f"/admin/queue_app/job/{job.id}/delete/", {"post": "yes"}).status_code == 403
    assert Job.objects.filter(id=job.id).exists()


def test_log_and_outbox_lists(admin_client, relay_path):
    job = make_job("failed", error="ValueError: outbox and log")
    logs = admin_client.get("/admin/queue_app/joblog/?level__exact=error")
    assert [entry.event for entry in logs.context["cl"].result_list] == ["failed"]
    assert "ValueError: outbox and log" in logs.content.decode()
    by_job = admin_client.get(f"/admin/queue_app/joblog/?q={job.id}")
    assert {entry.event for entry in by_job.context["cl"].result_list} == {"enqueued", "claimed", "failed"}
    by_words = admin_client.get("/admin/queue_app/joblog/?q=outbox log")
    assert [entry.event for entry in by_words.context["cl"].result_list] == ["failed"]

    pending = admin_client.get("/admin/queue_app/outboxmessage/?state=pending")
    rows = list(pending.context["cl"].result_list)
    assert [(row.job_id, row.action) for row in rows] == [(job.id, "enqueue")]
    assert "outbox-state-pending" in pending.content.decode()
    assert (
        list(admin_client.get("/admin/queue_app/outboxmessage/?state=dispatched").context["cl"].result_list)
        == []
    )


def test_duration_is_of_the_last_attempt(admin_client):
    running = make_job("processing")
    requeued = make_job("failed")
    services.retry_job(requeued.id)
    html = admin_client.get(changelist(f"q={running.id}")).content.decode()
    assert cell(html, "duration").endswith(" so far")
    html = admin_client.get(changelist(f"q={requeued.id}")).content.decode()
    assert cell(html, "duration") == "-"


# Columns an index can order by; sorting a large table by any other is a full sort.
INDEXED_COLUMNS = {
    "job": {"short_id", "job_type", "status_badge", "created_short"},
    "joblog": set(),  # listed newest first along the primary key; no column is indexed
    "outboxmessage": {"id"},
}


@pytest.mark.parametrize("model", sorted(INDEXED_COLUMNS))
def test_a_sort_no_index_serves_is_ignored_even_when_asked_in_the_url(admin_client, model):
    make_job("failed")
    url = f"/admin/queue_app/{model}/"
    default = admin_client.get(url).context["cl"]
    default_order = default.queryset.query.order_by
    for index, column in enumerate(default.list_display):
        for param in (str(index), f"-{index}", f"{index}.1"):
            cl = admin_client.get(url, {"o": param}).context["cl"]
            if column in INDEXED_COLUMNS[model]:
                continue
            if param.endswith(".1") and default.list_display[1] in INDEXED_COLUMNS[model]:
                assert cl.get_ordering_field_columns() == {1: "asc"}, (column, param)
            else:
                assert cl.queryset.query.order_by == default_order, (column, param)
