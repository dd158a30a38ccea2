"""Restore: queued jobs missing from Redis go back to the right structure with the right score."""

from datetime import timedelta

import pytest
from django.db.models.functions import Now
from django.utils import timezone

from queue_app import broker
from queue_app.models import Job
from queue_app.runtime.reconciler import Reconciler
from queue_app.states import Priority
from tests.helpers import ready_ids, ready_score, relay_all
from tests.reconciler.support import (
    QUEUES,
    enqueue,
    expected_member,
    expected_place,
    mark_relayed,
    set_fields,
)

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def seed_thousand() -> list[Job]:
    """1,000 queued jobs: both queues, every tier, a quarter scheduled, some due after a retry."""
    later = timezone.now() + timedelta(hours=1)
    jobs = []
    for priority in Priority.values:
        jobs += enqueue(200, priority=priority)
        jobs += enqueue(50, priority=priority, run_at=later)
        jobs += enqueue(50, priority=priority, queue="bulk")
    jobs += enqueue(100, queue="bulk", run_at=later)
    assert len(jobs) == 1000
    # Due again after a retry backoff that ended an hour ago (not just now).
    set_fields([j.id for j in jobs[:40]], next_retry_at=timezone.now() - timedelta(hours=1))
    # Distinct enqueue times for the FIFO jobs, so their order is checkable.
    for offset, job in enumerate(j for j in jobs if j.queue == "bulk"):
        set_fields([job.id], enqueued_at=timezone.now() - timedelta(minutes=30, seconds=offset))
    mark_relayed()
    return jobs


def test_one_run_restores_every_queued_job_after_redis_is_flushed(redis_client):
    jobs = seed_thousand()
    redis_client.flushdb()

    report = Reconciler(batch_size=64).run_once()

    scheduled = [j for j in jobs if j.next_retry_at is not None and j.next_retry_at > timezone.now()]
    assert report.counts["restored_retry"] == len(scheduled) == 250
    assert report.counts["restored_ready"] == 750
    assert report.counts["removed_stale"] == 0
    for job in jobs:
        key, member, score = expected_place(job, QUEUES[job.queue])
        if score is None:
            assert redis_client.lpos(key, member) is not None, job
        else:
            assert redis_client.zscore(key, member) == score, job
    # Each job exactly once, in exactly one structure.
    depths = broker.depths(redis_client, list(QUEUES.items()))
    assert depths == {
        "default": {"priority": 600, "fifo": 0, "retry": 150},
        "bulk": {"priority": 0, "fifo": 150, "retry": 100},
    }
    # The FIFO list is rebuilt in enqueue order, not in id order.
    fifo_due = Job.objects.filter(queue="bulk", next_retry_at__isnull=True).order_by("enqueued_at", "id")
    assert redis_client.lrange(broker.fifo_key("bulk"), 0, -1) == [
        str(pk) for pk in fifo_due.values_list("id", flat=True)
    ]
    # The run's temporary keys are gone.
    assert not redis_client.keys("*reconcile*")


def test_a_second_run_finds_nothing_to_do(redis_client):
    seed_thousand()
    redis_client.flushdb()
    Reconciler(batch_size=100).run_once()
    before = {key: redis_client.dump(key) for key in redis_client.keys("*")}

    report = Reconciler(batch_size=100).run_once()

    assert sum(report.counts.values()) == 0
    assert {key: redis_client.dump(key) for key in redis_client.keys("*")} == before


def test_partial_loss_restores_only_what_is_missing_and_puts_fifo_ones_first(redis_client):
    kept_ready, lost_ready = enqueue(3), enqueue(3)
    fifo_lost, fifo_kept = enqueue(3, queue="bulk"), enqueue(2, queue="bulk")
    for offset, job in enumerate(fifo_lost + fifo_kept):
        set_fields([job.id], enqueued_at=timezone.now() - timedelta(minutes=10, seconds=-offset))
    mark_relayed()
    for job in kept_ready:
        # A wrong score stays: only a missing member is restored.
        redis_client.zadd(broker.priority_key("default"), {expected_member(job): 1.0})
    survivors = [str(fifo_kept[1].id), str(fifo_kept[0].id)]  # the survivors' order is Redis's
    redis_client.rpush(broker.fifo_key("bulk"), *survivors)

    report = Reconciler(batch_size=2).run_once()

    assert report.counts["restored_ready"] == 6
    assert all(ready_score(redis_client, str(j.id)) == 1.0 for j in kept_ready)
    for job in lost_ready:
        key, member, score = expected_place(job, False)
        assert redis_client.zscore(key, member) == score
    assert redis_client.lrange(broker.fifo_key("bulk"), 0, -1) == [str(j.id) for j in fifo_lost] + survivors


@pytest.mark.parametrize("pushed_since", [2, 7])
def test_fifo_jobs_restored_after_a_redis_loss_go_ahead_of_jobs_pushed_since(redis_client, pushed_since):
    """Restored in front in enqueue order, whether the restored ids or those pushed since
    the loss are the fewer (the shorter list is moved onto the other)."""
    lost = enqueue(5, queue="bulk")
    for offset, job in enumerate(reversed(lost)):  # enqueue order differs from id order
        set_fields([job.id], enqueued_at=timezone.now() - timedelta(minutes=10, seconds=-offset))
    mark_relayed()
    redis_client.flushdb()  # Redis comes back empty; producers and the relay go on
    pushed = enqueue(pushed_since, queue="bulk")
    relay_all()

    report = Reconciler(batch_size=2, grace_seconds=0).run_once()

    assert report.counts["restored_ready"] == 5
    expected = [str(j.id) for j in reversed(lost)] + [str(j.id) for j in pushed]
    assert redis_client.lrange(broker.fifo_key("bulk"), 0, -1) == expected
    assert redis_client.ttl(broker.fifo_key("bulk")) == -1  # the temporary key's expiry did not come along
    assert not redis_client.keys("*reconcile*")


def test_a_due_job_still_in_the_retry_set_counts_as_present(redis_client):
    (job,) = enqueue(1)
    set_fields([job.id], next_retry_at=timezone.now() - timedelta(hours=1))
    mark_relayed()
    redis_client.zadd(broker.retry_key("default"), {str(job.id): 1.0})  # awaiting promotion

    report = Reconciler().run_once()

    assert report.counts["restored_ready"] == 0
    assert redis_client.zcard(broker.priority_key("default")) == 0


def test_jobs_whose_outbox_row_is_undispatched_are_left_to_the_relay(redis_client):
    pending = enqueue(2) + enqueue(1, run_at=timezone.now() + timedelta(hours=1))  # relay not run

    report = Reconciler().run_once()

    assert report.counts["skipped_relay_pending"] == 3
    assert report.counts["restored_ready"] == report.counts["restored_retry"] == 0
    assert redis_client.dbsize() == 0
    assert len(pending) == 3


def test_grace_skips_jobs_the_relay_or_a_promotion_just_touched(redis_client):
    just_dispatched = enqueue(1)
    mark_relayed(seconds_ago=2)  # within the 30 s grace: perhaps popped, claim in flight
    just_due = enqueue(1)
    # Promotion in flight; by the database's clock, which the reconciler's grace reads (the
    # test's transaction began earlier: on a loaded machine, seconds earlier).
    set_fields([just_due[0].id], next_retry_at=Now() - timedelta(seconds=2))
    long_lost = enqueue(1)
    mark_relayed(seconds_ago=3600)

    report = Reconciler().run_once()

    assert report.counts["skipped_grace"] == 2
    assert report.counts["restored_ready"] == 1
    assert ready_ids(redis_client) == [str(long_lost[0].id)]
    assert just_dispatched and just_due

    # After the grace they are restored too.
    report = Reconciler(grace_seconds=1).run_once()
    assert report.counts["restored_ready"] == 2
    assert redis_client.zcard(broker.priority_key("default")) == 3


def test_jobs_of_an_unconfigured_queue_are_counted_and_left(redis_client, queue_config):
    enqueue(1, queue="bulk")
    mark_relayed()
    queue_config(QUEUES={"default": False})

    report = Reconciler().run_once()

    assert report.counts["skipped_unknown_queue"] == 1
    assert redis_client.dbsize() == 0


def test_an_unconfigured_queue_logs_one_warning_per_pass_and_a_few_of_its_jobs(
    redis_client, queue_config, monkeypatch
):
    """A queue dropped from QUEUES with jobs left: every pass meets them all again, so one
    line per job at warning would flood the log; one warning per queue gives the count."""
    from structlog.testing import capture_logs

    from queue_app.runtime import reconciler

    monkeypatch.setattr(reconciler, "CHANGES_LOGGED_PER_ACTION", 5)
    enqueue(8, queue="bulk")
    mark_relayed()
    queue_config(QUEUES={"default": False})

    for _ in range(2):
        with capture_logs() as logs:
            report = Reconciler(batch_size=3).run_once()

        assert report.counts["skipped_unknown_queue"] == 8
        warnings = [
            (e["event"], e.get("queue"), e.get("queued_jobs")) for e in logs if e["log_level"] == "warning"
        ]
        assert warnings == [("reconcile_unknown_queue", "bulk", 8)]
        # The first few per pass at info, then one line saying the rest go to debug.
        per_job = [e["log_level"] for e in logs if e["event"] == "reconcile_skipped_unknown_queue"]
        assert per_job == ["info"] * 5
        limited = [e["action"] for e in logs if e["event"] == "reconcile_detail_limited"]
        assert limited == ["skipped_unknown_queue"]


def test_summary_line_has_every_count():
    enqueue(2)
    mark_relayed()

    report = Reconciler().run_once()

    assert report.summary().startswith(
        "reconcile: restored_ready=2 restored_retry=0 removed_stale=0 requeued_expired=0 "
        "failed_expired=0 expired=0 skipped_relay_pending=0 skipped_grace=0 skipped_unknown_queue=0 seconds="
    )


def test_a_mass_restore_logs_its_first_changes_of_each_kind_then_progress_and_counts(
    redis_client, monkeypatch
):
    """Restoring every job after a Redis loss must not log one info line per job: the first
    few of each kind in detail, then progress lines, and the summary counts them all."""
    from structlog.testing import capture_logs

    from queue_app.runtime import reconciler

    monkeypatch.setattr(reconciler, "CHANGES_LOGGED_PER_ACTION", 5)
    monkeypatch.setattr(reconciler, "PROGRESS_EVERY_SECONDS", 0.0)
    enqueue(30)
    enqueue(10, run_at=timezone.now() + timedelta(hours=1))
    mark_relayed()
    redis_client.flushdb()
    reported: list[str] = []

    with capture_logs() as logs:
        report = Reconciler(batch_size=8, report=reported.append).run_once()

    assert (report.counts["restored_ready"], report.counts["restored_retry"]) == (30, 10)
    assert len(ready_ids(redis_client, "default")) == 30
    detailed = [e["event"] for e in logs if e["log_level"] == "info" and "job_id" in e]
    assert detailed.count("reconcile_restored_ready") == 5
    assert detailed.count("reconcile_restored_retry") == 5
    limited = [e["action"] for e in logs if e["event"] == "reconcile_detail_limited"]
    assert sorted(limited) == ["restored_ready", "restored_retry"]
    progress = [e for e in logs if e["event"] == "reconcile_progress"]
    assert len(progress) == 5  # one per page of 8: 40 queued jobs
    assert progress[-1]["restored_ready"] + progress[-1]["restored_retry"] == 40
    assert [line for line in reported if line.startswith("reconcile progress after")] != []
    assert reported[-1].startswith("reconcile: restored_ready=30 restored_retry=10 ")


def test_a_run_within_the_detail_limit_says_nothing_about_a_limit(redis_client, monkeypatch):
    from structlog.testing import capture_logs

    from queue_app.runtime import reconciler

    monkeypatch.setattr(reconciler, "CHANGES_LOGGED_PER_ACTION", 5)
    enqueue(5)
    mark_relayed()
    redis_client.flushdb()

    with capture_logs() as logs:
        report = Reconciler().run_once()

    assert report.counts["restored_ready"] == 5
    assert [e["event"] for e in logs if "job_id" in e] == ["reconcile_restored_ready"] * 5
    assert not [e for e in logs if e["event"] == "reconcile_detail_limited"]
