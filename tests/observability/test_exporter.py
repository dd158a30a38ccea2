"""runworker --metrics-port: a worker host without a web process serves its own counters."""

import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from queue_app.observability.metrics import MULTIPROC_ENV
from queue_app.services import enqueue_job
from tests.helpers import PROJECT_ROOT, child_env, kill_group, manage, relay_all, wait_until
from tests.observability.support import parse, sample

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes, pytest.mark.redis]

ECHO = {"type": "demo.echo", "queue": "default"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: int) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return parse(response.read().decode())
    except OSError:
        return {}  # not listening yet


def test_the_worker_serves_the_counters_of_its_children(monkeypatch):
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)  # the command makes a private directory
    port = free_port()
    for n in range(3):
        enqueue_job("demo.echo", {"n": n})
    relay_all()
    worker = manage("runworker", "--concurrency=2", f"--metrics-port={port}", env=child_env())
    try:

        def three_completed() -> dict:
            scraped = scrape(port)
            return scraped if sample(scraped, "jobqueue_jobs_completed_total", **ECHO) == 3 else {}

        scraped = wait_until(three_completed, timeout=60, message="three completions to be served")
        assert sample(scraped, "jobqueue_jobs_started_total", **ECHO) == 3
        assert sample(scraped, "jobqueue_job_run_seconds_count", **ECHO) == 3
        # Depths are the web's /metrics' alone: one scrape per cluster, not per worker host.
        assert not any(name == "jobqueue_jobs" for name, _ in scraped)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        kill_group(worker)


@pytest.mark.parametrize("argument", ["--metrics-port=0", "--metrics-port=70000"])
def test_a_bad_port_is_refused_naming_the_option(argument):
    done = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "manage.py"), "runworker", argument],
        env=child_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "--metrics-port" in done.stderr


@pytest.mark.parametrize("command", [("runworker",), ("reconcile_queue", "--loop")])
def test_a_port_in_use_is_refused_naming_the_option(command):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = manage(*command, f"--metrics-port={port}", stderr=subprocess.PIPE, text=True)
        try:
            _, stderr = process.communicate(timeout=60)
        finally:
            kill_group(process)
    assert process.returncode == 1
    assert f"CommandError: --metrics-port {port}: Address already in use" in stderr
    assert "Traceback" not in stderr
