"""What the partition test does through Django against the stores it started: enqueue, check.

The test process's own Django talks to the suite's test database; this module
runs in a child process whose environment names the namespaced stores (through
their Unix sockets, which no cut reaches), as the chaos run's final checks run
in a process of their own:

    python -m tests.hosts.control enqueue FOLDER PHASE COUNT PAYLOAD_JSON
    python -m tests.hosts.control check FOLDER LEASE_SECONDS

``enqueue`` submits ``probe.chaos`` jobs through the service layer, each with a
``ref`` in its payload, and records them in ``FOLDER/submissions.jsonl`` as the
chaos run's clients do; it prints the new ids as JSON. ``check`` runs one
reconcile pass, then the chaos run's invariants (scripts/chaoslib/invariants.py)
over PostgreSQL, Redis and the execution journal the workers wrote in
``FOLDER/journal``, and prints each result as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
QUEUES = {"default": False}
MAX_ATTEMPTS = 10


def enqueue(folder: Path, phase: str, count: int, payload: dict) -> list[str]:
    from queue_app.services import JobRequest, enqueue_jobs

    path = folder / "submissions.jsonl"
    start = sum(1 for _ in path.open()) if path.exists() else 0
    refs = [f"{phase}-{start + index}" for index in range(count)]
    jobs = enqueue_jobs(
        [JobRequest("probe.chaos", {**payload, "ref": ref}, max_attempts=MAX_ATTEMPTS) for ref in refs]
    )
    with path.open("a") as record:
        for ref, job in zip(refs, jobs, strict=True):
            record.write(json.dumps({"ref": ref, "id": str(job.id), "payload": job.payload}) + "\n")
    return [str(job.id) for job in jobs]


def _submissions(folder: Path) -> list:
    from chaoslib.clients import Spec, Submission

    submissions = []
    for line in (folder / "submissions.jsonl").open():
        item = json.loads(line)
        spec = Spec(
            ref=item["ref"],
            channel="service",
            at=0.0,
            type="probe.chaos",
            payload=item["payload"],
            priority="medium",
            queue="default",
            delay=None,
            max_attempts=MAX_ATTEMPTS,
            key=None,
        )
        submissions.append(Submission(spec, acked_ids=[item["id"]], tries=1, outcome="acked"))
    return submissions


def check(folder: Path, lease_seconds: float) -> list[dict]:
    """Every invariant of the chaos run that applies: all but its fault counts and process exits."""
    from chaoslib import invariants, journal
    from django.core.management import call_command

    call_command("reconcile_queue", verbosity=0)
    results = [invariants.check_redis_agrees(QUEUES), invariants.check_redis_empty(QUEUES)]
    invariants.load(_submissions(folder), journal.read(folder / "journal"))
    results += invariants.run_sql_checks(cancel_race_seconds=lease_seconds / 3 + 1.0)
    results.append(invariants.check_log_trails())
    return [
        {
            "name": result.name,
            "passed": result.passed,
            "violations": result.violations,
            "examples": [list(map(str, example)) for example in result.examples],
            "checked": result.checked,
        }
        for result in results
    ]


def main(argv: list[str]) -> None:
    import django

    sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
    django.setup()
    action, folder = argv[0], Path(argv[1])
    if action == "enqueue":
        print(json.dumps(enqueue(folder, argv[2], int(argv[3]), json.loads(argv[4]))))
    elif action == "check":
        print(json.dumps(check(folder, float(argv[2]))))
    else:
        raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
