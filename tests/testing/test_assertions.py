"""assert_enqueued, assert_not_enqueued and enqueued_jobs against the real job table.

The reference is Oban.Testing: ``assert_enqueued`` matches ``args`` partially with
PostgreSQL's JSON containment (``args @> expected``), sees available and scheduled jobs,
and a failure lists the jobs found instead; ``refute_enqueued`` is its negation and
``all_enqueued`` lists the matches.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from queue_app.services import JobRequest, cancel_job, enqueue_job, enqueue_jobs
from queue_app.testing import assert_enqueued, assert_not_enqueued, enqueued_jobs

pytestmark = pytest.mark.django_db


def test_a_payload_matches_as_a_subset_nested_objects_included():
    job = enqueue_job("demo.echo", {"invoice": 42, "customer": {"id": 7, "plan": "pro"}, "lines": [1, 2]})

    assert assert_enqueued(type="demo.echo", payload={"invoice": 42}) == job
    assert assert_enqueued(payload={"customer": {"plan": "pro"}}) == job
    assert assert_enqueued(payload={"lines": [2]}) == job  # an array contains its elements (jsonb @>)
    assert assert_enqueued(type="demo.echo") == job
    with pytest.raises(AssertionError):
        assert_enqueued(payload={"invoice": 43})
    with pytest.raises(AssertionError):
        assert_enqueued(payload={"customer": {"id": 7, "plan": "basic"}})


def test_queue_priority_and_other_fields_narrow_the_match(queue_config):
    queue_config(QUEUES="default,mail")
    job = enqueue_job("demo.echo", {"n": 1}, queue="mail", priority="high", max_attempts=4)

    assert assert_enqueued(type="demo.echo", queue="mail", priority="high", max_attempts=4) == job
    assert assert_enqueued(priority=10) == job  # the integer the tier stands for
    assert_not_enqueued(queue="default")
    assert_not_enqueued(priority="low")
    assert_not_enqueued(type="demo.echo", max_attempts=5)


def test_a_scheduled_job_is_enqueued_and_a_finished_or_cancelled_one_is_not():
    later = enqueue_job("demo.echo", {"n": "later"}, run_at=timezone.now() + timedelta(hours=1))
    cancelled = enqueue_job("demo.echo", {"n": "cancelled"})
    cancel_job(cancelled.id)

    assert assert_enqueued(payload={"n": "later"}) == later
    assert_enqueued(payload={"n": "later"}, next_retry_at__gt=timezone.now())
    assert_not_enqueued(payload={"n": "cancelled"})


def test_a_failed_assertion_lists_the_queued_jobs_of_that_type():
    first = enqueue_job("demo.echo", {"invoice": 41})
    second = enqueue_job("demo.echo", {"invoice": 40}, priority="high")
    enqueue_job("demo.sleep", {"seconds": 1})

    with pytest.raises(AssertionError) as failed:
        assert_enqueued(type="demo.echo", payload={"invoice": 42}, queue="default")

    assert str(failed.value) == (
        "Expected a queued job matching type='demo.echo', payload containing {'invoice': 42},"
        " queue='default'.\n"
        "Queued instead, 2 jobs of type 'demo.echo':\n"
        f"  - {second.id}: type='demo.echo', queue='default', priority=10 (high), payload={{'invoice': 40}}\n"
        f"  - {first.id}: type='demo.echo', queue='default', priority=0 (medium), payload={{'invoice': 41}}"
    )


def test_with_none_of_that_type_queued_the_failure_lists_every_queued_job():
    later = enqueue_job("demo.sleep", {"seconds": 1}, run_at=timezone.now() + timedelta(hours=1))

    with pytest.raises(AssertionError) as failed:
        assert_enqueued(type="demo.echo")

    message = str(failed.value)
    assert message.startswith(
        "Expected a queued job matching type='demo.echo'.\n"
        "No job of type 'demo.echo' is queued. Queued instead, 1 job:\n"
        f"  - {later.id}: type='demo.sleep', queue='default', priority=0 (medium),"
        " payload={'seconds': 1}, scheduled for "
    )
    assert later.next_retry_at.isoformat() in message


def test_with_nothing_queued_the_failure_says_so():
    with pytest.raises(
        AssertionError, match=r"^Expected a queued job matching anything\.\nNo job is queued at all\.$"
    ):
        assert_enqueued()


def test_a_long_list_is_cut_after_ten_jobs():
    enqueue_jobs([JobRequest(type="demo.echo", payload={"n": n}) for n in range(13)])

    with pytest.raises(AssertionError) as failed:
        assert_enqueued(type="demo.echo", payload={"n": 99})

    lines = str(failed.value).splitlines()
    assert lines[1] == "Queued instead, 13 jobs of type 'demo.echo':"
    assert len([line for line in lines if line.startswith("  - ")]) == 10
    assert lines[-1] == "  ... and 3 more"


def test_assert_not_enqueued_fails_listing_the_jobs_that_match():
    job = enqueue_job("demo.echo", {"invoice": 42, "extra": True})
    enqueue_job("demo.echo", {"invoice": 43})

    assert_not_enqueued(type="demo.echo", payload={"invoice": 44})
    with pytest.raises(AssertionError) as failed:
        assert_not_enqueued(type="demo.echo", payload={"invoice": 42})

    assert str(failed.value) == (
        "Expected no queued job matching type='demo.echo', payload containing {'invoice': 42}.\n"
        "Found 1 queued job:\n"
        f"  - {job.id}: type='demo.echo', queue='default', priority=0 (medium),"
        " payload={'extra': True, 'invoice': 42}"
    )


def test_enqueued_jobs_are_listed_in_the_order_a_worker_runs_them():
    low = enqueue_job("demo.echo", {"n": 1}, priority="low")
    first = enqueue_job("demo.echo", {"n": 2})
    urgent = enqueue_job("demo.echo", {"n": 3}, priority=50)
    second = enqueue_job("demo.echo", {"n": 4})
    enqueue_job("demo.sleep", {"seconds": 1})

    assert enqueued_jobs(type="demo.echo") == [urgent, first, second, low]
    assert enqueued_jobs(type="demo.echo", payload={"n": 2}) == [first]
    assert enqueued_jobs(type="demo.fail") == []


def test_a_payload_that_is_not_an_object_or_an_unknown_priority_is_refused():
    with pytest.raises(TypeError, match="payload must be a dict"):
        assert_enqueued(payload=[1])
    with pytest.raises(ValueError, match="priority must be one of high, medium, low or an integer"):
        enqueued_jobs(priority="urgent")
