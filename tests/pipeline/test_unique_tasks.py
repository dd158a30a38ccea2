"""Unique django.tasks: ``@task(unique=True)`` enqueues one job per task, queue and arguments.

django.tasks has no place for a caller's key (``Task.using`` takes priority, queue,
run_after and backend only), so the key is the call's, as Oban's default unique
fields are the worker, queue and args.
"""

import pytest
from django.tasks import task
from django.tasks.exceptions import InvalidTask
from django.tasks.signals import task_enqueued

from queue_app.models import Job
from queue_app.testing import run_jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


@task(unique=True)
def unique_sum(a: int, b: int) -> int:
    return a + b


@task(unique=True, unique_for=3600, unique_states=["queued", "processing", "completed"])
def hourly_sum(a: int, b: int) -> int:
    return a + b


def test_the_same_call_returns_the_job_already_queued_without_a_second_enqueued_signal():
    sent = []

    def receiver(sender, task_result, **kwargs):
        sent.append(task_result.id)

    task_enqueued.connect(receiver)
    try:
        first = unique_sum.enqueue(1, 2)
        again = unique_sum.enqueue(1, 2)
        other = unique_sum.enqueue(2, 1)
        sooner = unique_sum.using(priority=5).enqueue(1, 2)
    finally:
        task_enqueued.disconnect(receiver)

    assert again.id == first.id == sooner.id and other.id != first.id
    assert again.args == [1, 2] and again.task.func is unique_sum.func
    assert sent == [first.id, other.id]
    assert Job.objects.count() == 2


def test_once_its_job_ran_the_same_call_enqueues_again():
    first = unique_sum.enqueue(3, 4)
    assert run_jobs().completed == 1
    again = unique_sum.enqueue(3, 4)

    assert again.id != first.id
    assert unique_sum.get_result(first.id).return_value == 7


def test_with_completed_in_its_statuses_a_call_runs_at_most_once_per_period():
    first = hourly_sum.enqueue(5, 6)
    assert run_jobs().completed == 1
    again = hourly_sum.enqueue(5, 6)

    assert again.id == first.id and again.return_value == 11
    assert Job.objects.count() == 1


def plain_function() -> None:
    """Module level, as django.tasks requires: only the options below are at fault."""


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_for": 60}, "need unique=True"),
        ({"unique_states": ["queued"]}, "need unique=True"),
        ({"unique": True, "unique_for": 0}, "unique_for"),
        ({"unique": True, "unique_states": "queued"}, "unique_states"),
        ({"unique": True, "unique_states": ["asleep"]}, "unique_states"),
    ],
)
def test_bad_unique_options_are_refused_when_the_task_is_defined(options, message):
    assert task(unique=True, unique_for=5)(plain_function).unique_for == 5
    with pytest.raises(InvalidTask, match=message):
        task(**options)(plain_function)
