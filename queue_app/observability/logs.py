"""The app's loggers: structlog events that follow whatever logging the project set up.

queue_app configures no logging of its own. A project that configures structlog
(``structlog.configure`` in its settings, as jobsite does) gets the app's events
through that configuration. A project that does not gets them as standard
library records of the ``queue_app.*`` loggers, one line each
(``job_failed job_id=... error=...``), so its ``LOGGING`` decides what is shown
and where, as for any Django app; structlog's unconfigured default would print
every event, debug ones included, to stdout.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog


def _as_message(logger: logging.Logger, method_name: str, event_dict: dict[str, Any]) -> Any:
    """The event name and its fields as the record's message; an exception goes to logging."""
    exc_info = event_dict.pop("exc_info", None)
    event = event_dict.pop("event", "")
    fields = structlog.processors.LogfmtRenderer()(logger, method_name, event_dict)
    message = f"{event} {fields}" if fields else str(event)
    return ((message,), {"exc_info": exc_info}) if exc_info else message


_STDLIB_PROCESSORS = [
    # An event below the level the project's LOGGING shows ends here, before any formatting.
    structlog.stdlib.filter_by_level,
    structlog.contextvars.merge_contextvars,
    _as_message,
]


class _Logger:
    """One ``queue_app.*`` logger: the project's structlog when it has configured structlog,
    else the standard library logger of the same name. Decided at each call, so a project
    that configures structlog after the app's modules are imported is still followed."""

    __slots__ = ("_structlog", "_stdlib")

    def __init__(self, name: str) -> None:
        self._structlog = structlog.get_logger(name)
        self._stdlib = structlog.stdlib.BoundLogger(logging.getLogger(name), _STDLIB_PROCESSORS, {})

    def __getattr__(self, method: str) -> Any:
        return getattr(self._structlog if structlog.is_configured() else self._stdlib, method)


def get_logger(name: str) -> Any:
    """The logger a module of the app writes its events to, named after it: ``get_logger(__name__)``
    (``queue_app.runtime.worker``, ...), so a project's LOGGING can pick out one module or all of
    ``queue_app``."""
    return _Logger(name)
