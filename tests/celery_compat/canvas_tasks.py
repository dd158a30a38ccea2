"""Tasks for the canvas cases ported from Celery's integration tests (t/integration/test_canvas.py),
written against Celery's task API, with the queue's import."""

from queue_app.contrib.celery import shared_task


class ExpectedException(Exception):
    """What ``fail`` raises: a test expects it back from ``get()``."""


@shared_task
def add(x, y):
    return x + y


@shared_task
def identity(x):
    return x


@shared_task
def tsum(numbers):
    return sum(numbers)


@shared_task
def add_to_all(numbers, value):
    return [number + value for number in numbers]


@shared_task
def fail(*args):
    raise ExpectedException("Task expected to fail", *args)
