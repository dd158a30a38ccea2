"""Job ids are time-ordered UUIDs (version 7, RFC 9562): new rows append to every index on them."""

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from queue_app.ids import ID_SPAN_DIGITS, id_spans, new_job_id, uuid7
from queue_app.models import Job
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs


def test_the_layout_reproduces_the_rfc_9562_example():
    # RFC 9562, Appendix A.6: Unix time 0x017F22E279B0 ms (2022-02-22 19:22:22 UTC),
    # rand_a 0xCC3, rand_b 0x18C4DC0C0C07398F.
    made = uuid7(0x017F22E279B0, 0xCC3, 0x18C4DC0C0C07398F)
    assert made == uuid.UUID("017F22E2-79B0-7CC3-98C4-DC0C0C07398F")
    assert (made.version, made.variant) == (7, uuid.RFC_4122)


def test_a_new_id_carries_the_time_it_was_made():
    before = time.time_ns() // 1_000_000
    made = new_job_id()
    after = time.time_ns() // 1_000_000
    assert (made.version, made.variant) == (7, uuid.RFC_4122)
    assert before <= made.int >> 80 <= after


def test_ids_made_apart_sort_in_the_order_they_were_made():
    made = []
    for _ in range(20):
        made.append(new_job_id())
        time.sleep(0.0005)
    assert sorted(made) == made
    assert len(set(made)) == len(made)


@pytest.mark.django_db
@pytest.mark.redis
def test_jobs_enqueued_one_after_another_follow_each_other_in_the_primary_key():
    single = [enqueue_job("demo.echo", {"n": n}).id for n in range(10)]
    requests = [JobRequest(type="demo.echo", payload={"n": n}) for n in range(10)]
    bulk = [job.id for job in enqueue_jobs(requests)]
    assert all(job_id.version == 7 for job_id in single + bulk)
    # PostgreSQL orders uuids by their bytes: the order of the calls.
    assert list(Job.objects.order_by("id").values_list("id", flat=True)[:10]) == single
    assert set(Job.objects.order_by("id").values_list("id", flat=True)[10:]) == set(bulk)


def test_a_job_made_through_the_orm_gets_a_time_ordered_id_too():
    assert Job(type="demo.echo").id.version == 7


def test_the_spans_from_one_moment_to_another_hold_every_id_made_between_them():
    since = datetime(2026, 9, 1, tzinfo=UTC)
    until = since + timedelta(days=90)
    spans = id_spans(since, until)
    # 2**24 ms spans (4.7 hours): 90 days are 464 of them, and one of margin each side.
    assert 90 * 24 * 3600 * 1000 // (1 << 24) + 2 <= len(spans) <= 90 * 24 * 3600 * 1000 // (1 << 24) + 4
    assert spans == sorted(spans) and len(set(spans)) == len(spans)
    for moment in (since, since + timedelta(days=45), until):
        made = uuid7(int(moment.timestamp() * 1000), 0, 0)
        assert str(made)[:ID_SPAN_DIGITS] in spans[1:-1]
    # The margin: an id made a moment before ``since``, or just after ``until``.
    for moment in (since - timedelta(milliseconds=1), until + timedelta(milliseconds=1)):
        assert str(uuid7(int(moment.timestamp() * 1000), 0, 0))[:ID_SPAN_DIGITS] in spans
    long_before = since - timedelta(hours=10)
    assert str(uuid7(int(long_before.timestamp() * 1000), 0, 0))[:ID_SPAN_DIGITS] not in spans
