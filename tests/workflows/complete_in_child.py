"""Run in a child process: complete one claimed job at a given moment, holding the
completion's transaction open for a while before it commits.

    python -m tests.workflows.complete_in_child <job id> <fence> <start epoch> <hold seconds>
"""

import os
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

from django.db import transaction  # noqa: E402

from queue_app.engine import execution  # noqa: E402


def main() -> None:
    job_id, fence, start, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    while time.time() < start:
        time.sleep(0.0005)
    with transaction.atomic():
        done = execution.complete_jobs([execution.Completion(job_id, fence, {"by": os.getpid()})])
        print("completed" if done else "fenced", flush=True)
        time.sleep(hold)


if __name__ == "__main__":
    main()
