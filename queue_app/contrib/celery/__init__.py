"""Celery's task API on this queue: a module written for Celery runs with its imports changed.

    from celery import shared_task                -> from queue_app.contrib.celery import shared_task
    from celery import Celery                     -> from queue_app.contrib.celery import Celery
    from celery.result import AsyncResult         -> from queue_app.contrib.celery.result import AsyncResult
    from celery.exceptions import ...             -> from queue_app.contrib.celery.exceptions import ...
    from celery.utils.log import get_task_logger  -> from queue_app.contrib.celery.utils.log import ...

Tasks are job handlers (task.py), results are job rows (result.py). Add
``"queue_app.contrib.celery"`` to INSTALLED_APPS so workers import the task
modules (apps.py). docs/how-to/from-celery.md maps every option.
"""

from queue_app.contrib.celery import states
from queue_app.contrib.celery.app import Celery, current_app
from queue_app.contrib.celery.canvas import Signature, chain, chord, chunks, group, signature, xmap, xstarmap
from queue_app.contrib.celery.result import AsyncResult
from queue_app.contrib.celery.task import Task


def shared_task(*args, **options):
    """``@shared_task`` / ``@shared_task(bind=True, ...)``: a task of no particular app."""
    from queue_app.contrib.celery.task import task_decorator

    return task_decorator(None, args, options)


__all__ = [
    "AsyncResult",
    "Celery",
    "Signature",
    "Task",
    "chain",
    "chord",
    "chunks",
    "current_app",
    "group",
    "shared_task",
    "signature",
    "states",
    "xmap",
    "xstarmap",
]
