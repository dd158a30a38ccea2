"""Stop signals that reach a worker process while it is still starting."""

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.helpers import PROJECT_ROOT, child_env, kill_group, wait_until

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
    print('{"event": "test_worker_building"}', file=sys.stderr, flush=True)
    time.sleep(1.5)
    built(self, *args, **kwargs)

worker.Worker.__init__ = slow_init
from django.core.management import call_command
call_command("runworker", "--name=starting-worker")
"""


def test_a_stop_while_a_worker_process_starts_reaches_the_worker_and_everything_exits_0():
    process = subprocess.Popen(
        [sys.executable, "-c", SLOW_START],
        cwd=PROJECT_ROOT,
        env=child_env(LOG_LEVEL="INFO"),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    events: list[dict] = []

    def read() -> None:
        for line in process.stderr:
            if line.startswith("{"):
                events.append(json.loads(line))

    threading.Thread(target=read, daemon=True).start()
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
