"""The no-op job every system runs: journal its start, return its argument."""

from common import record_start

from queue_app.handlers import job_handler


@job_handler("bench.noop")
def noop(payload: dict) -> int:
    return record_start(payload["n"])
