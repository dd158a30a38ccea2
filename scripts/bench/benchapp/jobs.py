"""The no-op job every system runs (journal its start, return its argument), a chord's
callback, and the soak's mixed job."""

import time

from common import record_start

from queue_app.services import current_job, job_handler


@job_handler("bench.noop")
def noop(payload: dict) -> int:
    return record_start(payload["n"])


@job_handler("bench.collect")
def collect(payload: dict) -> int:
    """A chord's callback: reads the group's results, as Celery's receives them as its argument."""
    results = current_job().parent_results()
    record_start(payload["n"])
    return len(results)


class SoakFailure(Exception):
    """What the soak's failing jobs raise."""


@job_handler("bench.soak", max_attempts=3, backoff="fixed", retry_backoff_base=2.0)
def soak(payload: dict) -> str:
    """The soak's mixed job (scripts/bench/soak.py): ``kind`` says what this one does."""
    kind = payload["kind"]
    if kind == "slow":
        time.sleep(payload["seconds"])
    elif kind == "flaky" and current_job().attempt == 1:
        raise SoakFailure("fails its first attempt")
    elif kind == "failing":
        raise SoakFailure("fails every attempt")
    return kind
