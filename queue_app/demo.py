"""Built-in demo job types, for trying the system and for black-box tests.

Registered only when settings.DEMO_JOB_TYPES is on (see queue_app/jobs.py):
anyone with an API token could otherwise make the workers sleep or fail.
"""

import time
from typing import Any

from queue_app.handlers import job_handler


class DemoFailure(Exception):
    """The error ``demo.fail`` raises."""


@job_handler("demo.echo")
def echo(payload: dict[str, Any]) -> dict[str, Any]:
    """Return the payload unchanged."""
    return payload


@job_handler("demo.sleep")
def sleep(payload: dict[str, Any]) -> dict[str, float]:
    """Sleep ``payload["seconds"]`` (default 1) seconds."""
    seconds = float(payload.get("seconds", 1))
    time.sleep(seconds)
    return {"slept": seconds}


@job_handler("demo.fail")
def fail(payload: dict[str, Any]) -> None:
    """Raise with ``payload["message"]``: exercises retries and final failure."""
    raise DemoFailure(str(payload.get("message", "demo failure")))
