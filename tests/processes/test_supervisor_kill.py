"""The supervisor's kill of a worker process that already exited (found by the chaos run)."""

import multiprocessing

import pytest

from queue_app.runtime.supervisor import Child, Supervisor


def _exit_at_once() -> None:
    pass


@pytest.mark.django_db(transaction=True)
def test_killing_a_worker_process_that_already_exited_and_was_reaped_does_not_crash_the_supervisor():
    # The chaos run's mid-job stop: SIGTERM, then SIGSTOP past the stop deadline. On SIGCONT
    # the supervisor killed a child from a list taken before the child exited and was
    # reaped; os.kill raised ProcessLookupError and runworker exited 1 instead of 0.
    supervisor = Supervisor(name="kill-reaped", queues=["default"], concurrency=1, burst=False)
    process = multiprocessing.get_context("fork").Process(target=_exit_at_once)
    process.start()
    process.join()  # exited and reaped: its pid is gone
    child = Child(index=0, worker_id="kill-reaped/0", process=process)

    supervisor._kill(child, "shutdown grace period ended")

    assert process.exitcode == 0
    assert child.current is None and child.slots == {}


@pytest.mark.django_db(transaction=True)
def test_killing_a_worker_process_already_settled_after_it_died_while_stopping_does_not_crash():
    # The chaos run again: past the stop deadline the supervisor killed each child from a
    # list taken before _reap, in the same round, settled one that had died meanwhile and,
    # the supervisor stopping, left it without a process. _kill then read its pid from
    # None, and runworker exited 1 instead of 0.
    supervisor = Supervisor(name="kill-settled", queues=["default"], concurrency=1, burst=False)
    child = Child(index=0, worker_id="kill-settled/0", process=None)

    supervisor._kill(child, "shutdown grace period ended")

    assert child.process is None
