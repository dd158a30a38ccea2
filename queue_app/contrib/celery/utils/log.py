"""``celery.utils.log.get_task_logger``: a standard logger named after the task module."""

import logging


def get_task_logger(name: str) -> logging.Logger:
    """The logger ``name``, as Celery's (which adds the task id to records; the worker's
    own structured log lines carry the job id here)."""
    return logging.getLogger(name)
