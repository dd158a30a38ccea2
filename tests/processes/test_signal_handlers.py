"""Stop signals never hang a process: the handlers take no lock.

A Python signal handler runs in the main thread between two bytecodes, possibly
while that thread holds a lock; a handler that takes the same lock waits for
ever (Python's ``signal`` documentation warns: "Synchronization primitives such
as threading.Lock should not be used within signal handlers"). Two such locks
were taken: ``threading.Event.set`` (the scheduler's and reconciler's stop) and
the log writer's lock (the worker and supervisor logged from their handlers).

Each case runs in a child process: round after round, a one-shot timer signal
lands a fraction of a millisecond later in the real handler, while the main
thread does what it does between stops (sleeping on the stop, or writing log
lines). Before the fix each case hung within the first few hundred rounds; the
child is killed after a timeout and the test fails.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from queue_app.runtime.stop_signal import StopSignal
from tests.helpers import PROJECT_ROOT, child_env

pytestmark = [pytest.mark.processes]

ROUNDS = 2000

STORM = """
import random, signal, sys
import django
django.setup()
import structlog

case, rounds = sys.argv[1], int(sys.argv[2])
log = structlog.get_logger("signal_storm")


def signal_soon():
    signal.setitimer(signal.ITIMER_REAL, random.uniform(0.00005, 0.0005))


if case == "stop_signal":
    from queue_app.runtime.stop_signal import StopSignal

    for round in range(rounds):
        stop = StopSignal()
        signal.signal(signal.SIGALRM, lambda *_: stop.set())
        signal_soon()
        while not stop.wait(0.0001):
            pass
else:
    if case == "worker":
        from queue_app.runtime.worker import Worker

        process = Worker(worker_id="storm/0", queues=["default"])
    else:
        from queue_app.runtime.supervisor import Supervisor

        process = Supervisor(name="storm", queues=["default"], concurrency=1, burst=False)
    signal.signal(signal.SIGALRM, lambda signum, frame: process._on_stop(signal.SIGTERM, frame))
    for round in range(rounds):
        process.stopping = False  # each signal is a first stop (the one that logged)
        signal_soon()
        while not process.stopping:
            log.info("between_signals", round=round)
print("finished", file=sys.stderr, flush=True)
"""


@pytest.mark.parametrize("case", ["stop_signal", "worker", "supervisor"])
def test_a_storm_of_stop_signals_never_hangs_the_process(case):
    process = subprocess.Popen(
        [sys.executable, "-c", STORM, case, str(ROUNDS)],
        cwd=PROJECT_ROOT,
        env=child_env(LOG_LEVEL="INFO"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"{case}: hung in a signal handler")
    assert process.returncode == 0, stderr[-2000:]
    assert stderr.rstrip().endswith("finished")


def test_a_stop_signal_cuts_a_long_wait_short():
    stop = StopSignal()
    previous = signal.signal(signal.SIGALRM, lambda *_: stop.set())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        started = time.monotonic()
        assert stop.wait(60) is True
        assert time.monotonic() - started < 30  # woken by the signal, not by the timeout
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert stop.wait(60) is True  # stays stopped, without sleeping again


def test_a_stop_from_another_thread_wakes_the_waiter():
    stop = StopSignal()
    threading.Timer(0.2, stop.set).start()
    assert stop.wait(60) is True
    assert stop.is_set()


def test_a_wait_without_a_stop_returns_false_after_its_timeout():
    stop = StopSignal()
    assert stop.wait(0.05) is False
    assert not stop.is_set()
