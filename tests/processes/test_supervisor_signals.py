"""Stop signals that reach a worker process while it is still starting."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import PROJECT_ROOT, child_env, kill_group, relay_all, wait_until
from tests.probe.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]

# runworker whose worker processes take 1.5 s to build their Worker: the window in which a
# forked child has not installed its own handlers yet, made wide enough to hit for sure.
SLOW_START = """
import sys, time
import django
django.setup()
from queue_app.runtime import worker

built = worker.Worker.__init__

def slow_init(self, *args, **kwargs):
    # One write: print() writes the line and its newline apart, and another process's
    # line written in between ran the two together.
    sys.stderr.write('{"event": "test_worker_building"}\\n')
    sys.stderr.flush()
    time.sleep(1.5)
    built(self, *args, **kwargs)

worker.Worker.__init__ = slow_init
from django.core.management import call_command
call_command("runworker", "--name=starting-worker")
"""


# runworker with a 5 s restart back-off instead of 1 s: a stop sent within it lands there
# for sure, however late a loaded machine lets the test send it.
LONG_BACKOFF = """
import django
django.setup()
from queue_app.runtime import supervisor

supervisor.RESTART_BACKOFF_SECONDS = 5.0
from django.core.management import call_command
call_command("runworker")
"""


def _start(script: str) -> tuple[subprocess.Popen, list[dict]]:
    """Run one of the scripts above as its own process group; its JSON log events as they come."""
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=PROJECT_ROOT,
        env=child_env(LOG_LEVEL="INFO"),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return process, _events(process)


def _events(process: subprocess.Popen) -> list[dict]:
    """The process's JSON log events, appended as it writes them."""
    events: list[dict] = []

    def read() -> None:
        for line in process.stderr:
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):  # a traceback's line, say
                    events.append(json.loads(line))

    threading.Thread(target=read, daemon=True).start()
    return events


def test_a_stop_while_a_worker_process_starts_reaches_the_worker_and_everything_exits_0():
    process, events = _start(SLOW_START)
    try:
        wait_until(
            lambda: any(e["event"] == "test_worker_building" for e in events),
            timeout=30,
            message="the worker process to start building",
        )
        os.kill(process.pid, signal.SIGTERM)  # the supervisor, which forwards it to the child
        assert process.wait(timeout=30) == 0
    finally:
        kill_group(process)
    names = [e["event"] for e in events]
    # The child got the stop as a worker (after its handlers were in) and stopped cleanly;
    # under the supervisor's inherited handler it crashed and exited 1.
    assert "worker_stopping" in names and "worker_stopped" in names
    assert not [e for e in events if e["event"] == "worker_process_exited"]
    assert "supervisor_stopped" in names


def test_a_stop_during_the_restart_back_off_starts_no_new_worker_process():
    """A worker process that died is replaced after a back-off. A stop within it reached only
    the processes alive; the replacement, started after it, never heard of it, ran the
    queue's next jobs and was killed at the end of the shutdown grace."""
    poison = enqueue_job("probe.poison", {"how": "os_exit"})
    others = enqueue_jobs([JobRequest(type="probe.run") for _ in range(3)])
    relay_all()
    process, events = _start(LONG_BACKOFF)
    try:
        # The supervisor settled the dead process's jobs; the back-off follows.
        wait_until(
            lambda: poison.logs.filter(event="retry_scheduled").exists(),
            timeout=30,
            interval=0.01,
            message="the dead worker process's job to be settled",
        )
        time.sleep(0.2)
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(timeout=15) == 0  # the back-off is 5 s, the shutdown grace 20 s
    finally:
        kill_group(process)
    names = [e["event"] for e in events]
    assert "worker_process_started" not in names[names.index("worker_process_exited") :]
    assert not Execution.objects.filter(job_id__in=[job.id for job in others]).exists()
