"""The invariants, checked in SQL over PostgreSQL plus the client's record and the execution journal.

The client's record and the journal are loaded into two tables of the run's
database (``chaos_submission``, ``chaos_execution``) so that each invariant
is one query returning its counter-examples. The log-trail walk and the
Redis comparison are done in Python against ``queue_app.states`` and
``queue_app.broker``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection

from chaoslib.clients import Submission
from queue_app import broker
from queue_app.states import INITIAL_EVENT, NON_TRANSITION_EVENTS, TERMINAL, TRANSITIONS, Status


@dataclass
class Result:
    name: str
    description: str
    violations: int
    examples: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.violations == 0


_TABLES = """
DROP TABLE IF EXISTS chaos_submission, chaos_execution;
CREATE TABLE chaos_submission (
    ref text PRIMARY KEY, channel text NOT NULL, idempotency_key text, outcome text NOT NULL,
    acked_ids uuid[] NOT NULL, tries int NOT NULL, far_future bool NOT NULL
);
CREATE TABLE chaos_execution (
    execution text PRIMARY KEY, job_id uuid NOT NULL, attempt int NOT NULL, pid int NOT NULL,
    started_at timestamptz NOT NULL, ended_at timestamptz, outcome text
);
CREATE INDEX ON chaos_execution (job_id);
"""


def load(submissions: Iterable[Submission], executions: Iterable[dict]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_TABLES)
        cursor.executemany(
            "INSERT INTO chaos_submission VALUES (%s, %s, %s, %s, %s::uuid[], %s, %s)",
            [
                (s.spec.ref, s.spec.channel, s.spec.key, s.outcome, s.acked_ids, s.tries, s.spec.far_future)
                for s in submissions
            ],
        )
        cursor.executemany(
            "INSERT INTO chaos_execution VALUES (%s, %s, %s, %s, to_timestamp(%s), to_timestamp(%s), %s)",
            [
                (e["execution"], e["job"], e["attempt"], e["pid"], e["at"], e["ended_at"], e["outcome"])
                for e in executions
            ],
        )


_TERMINAL = ", ".join(f"'{status}'" for status in sorted(TERMINAL))

# Pairs of executions of one job that ran at the same time; e1 is the one of the earlier claim
# (attempts count claims; two claims share a number only after a hand-back, then start order).
OVERLAPPING_EXECUTIONS = """chaos_execution e1
             JOIN chaos_execution e2 ON e2.job_id = e1.job_id
              AND (e1.attempt, e1.started_at, e1.execution) < (e2.attempt, e2.started_at, e2.execution)
              AND e2.started_at < coalesce(e1.ended_at, 'infinity')
              AND e1.started_at < coalesce(e2.ended_at, 'infinity')"""

# Cancelling a job does not stop a worker that claimed it from starting it (a worker re-checks
# its leases only when the last confirmation is older than a heartbeat); the attempt is fenced:
# it writes neither result nor effect. Such an execution of a job that was cancelled, retried
# and completed meanwhile may start after the completion. Nothing else may.
_CANCELLED_CLAIM = """
    j.result->>'execution' IS DISTINCT FROM e.execution
    AND NOT EXISTS (SELECT 1 FROM probe_effect f WHERE f.execution = e.execution)
    AND EXISTS (
        SELECT 1 FROM job_logs c
         WHERE c.job_id = e.job_id AND c.event = 'cancelled'
           AND c.id > (SELECT max(l.id) FROM job_logs l
                        WHERE l.job_id = e.job_id AND l.event = 'claimed'
                          AND (l.extra->>'attempt')::int = e.attempt))"""

# name -> (what must hold, a query returning the rows that break it)
SQL_CHECKS: dict[str, tuple[str, str]] = {
    "no_acknowledged_submission_lost": (
        "every job id an acknowledgement named exists",
        """SELECT s.ref, a.id FROM chaos_submission s, unnest(s.acked_ids) AS a(id)
            WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = a.id)""",
    ),
    "acknowledgements_name_the_submitted_job": (
        "an acknowledged id is the job of that submission, and repeats name the same job",
        """SELECT s.ref, a.id, j.payload->>'ref' FROM chaos_submission s, unnest(s.acked_ids) AS a(id)
             JOIN jobs j ON j.id = a.id WHERE j.payload->>'ref' IS DISTINCT FROM s.ref
           UNION ALL
           SELECT s.ref, NULL, array_to_string(s.acked_ids, ',') FROM chaos_submission s
            WHERE (SELECT count(DISTINCT x) FROM unnest(s.acked_ids) AS x) > 1""",
    ),
    "no_unexpected_job": (
        "every job comes from a submission the client made",
        """SELECT j.id, j.payload->>'ref' FROM jobs j
            WHERE NOT EXISTS (SELECT 1 FROM chaos_submission s WHERE s.ref = j.payload->>'ref')""",
    ),
    "one_job_per_submission_and_key": (
        "a submission (and so an idempotency key) made at most one job",
        """SELECT payload->>'ref', count(*) FROM jobs GROUP BY 1 HAVING count(*) > 1
           UNION ALL
           SELECT idempotency_key, count(*) FROM jobs WHERE idempotency_key IS NOT NULL
            GROUP BY 1 HAVING count(*) > 1""",
    ),
    "every_job_terminal": (
        "every job ends completed, failed or cancelled",
        f"""SELECT id, status FROM jobs WHERE status NOT IN ({_TERMINAL})""",
    ),
    "attempts_within_max": (
        "attempts never exceed max_attempts (nor do journaled executions)",
        """SELECT id, attempts, max_attempts FROM jobs WHERE attempts > max_attempts
           UNION ALL
           SELECT e.job_id, e.attempt, j.max_attempts FROM chaos_execution e JOIN jobs j ON j.id = e.job_id
            WHERE e.attempt > j.max_attempts""",
    ),
    "completed_by_its_last_attempt": (
        "a completed job has one 'completed' log row, and it, the result and the completing"
        " execution all carry the job's last attempt",
        """SELECT j.id, j.attempts, j.result FROM jobs j
            WHERE j.status = 'completed' AND (
                  (j.result->>'attempt')::int IS DISTINCT FROM j.attempts
               OR (SELECT count(*) FROM job_logs l WHERE l.job_id = j.id AND l.event = 'completed') <> 1
               OR NOT EXISTS (SELECT 1 FROM job_logs l WHERE l.job_id = j.id AND l.event = 'completed'
                                 AND (l.extra->>'attempt')::int = j.attempts)
               OR NOT EXISTS (SELECT 1 FROM chaos_execution e WHERE e.execution = j.result->>'execution'
                                 AND e.job_id = j.id AND e.attempt = j.attempts
                                 AND e.outcome = 'returned'))""",
    ),
    "no_unfenced_overlap": (
        "two executions of a job overlap only if the earlier claim's was fenced (wrote neither"
        " result nor effect)",
        f"""SELECT e1.job_id, e1.execution, e2.execution
             FROM {OVERLAPPING_EXECUTIONS} JOIN jobs j ON j.id = e1.job_id
            WHERE j.result->>'execution' = e1.execution
               OR EXISTS (SELECT 1 FROM probe_effect f WHERE f.execution = e1.execution)""",
    ),
    "no_execution_after_completion": (
        "no execution starts after its job completed, unless its claim was cancelled and it wrote nothing",
        f"""SELECT e.job_id, e.execution, e.started_at, j.completed_at
             FROM chaos_execution e JOIN jobs j ON j.id = e.job_id
            WHERE j.status = 'completed' AND (e.started_at > j.completed_at OR e.attempt > j.attempts)
              AND NOT ({_CANCELLED_CLAIM})""",
    ),
    "effect_exactly_once_per_completed_job": (
        "a probe.chaos job's side effect exists once if it completed (by the completing"
        " execution), never otherwise",
        """SELECT j.id, j.status, count(f.id) FROM jobs j
             LEFT JOIN probe_effect f ON f.job_id = j.id
            WHERE j.type = 'probe.chaos'
            GROUP BY j.id, j.status, j.result
           HAVING count(f.id) <> CASE WHEN j.status = 'completed' THEN 1 ELSE 0 END
               OR (j.status = 'completed' AND NOT bool_and(f.execution = j.result->>'execution'))
           UNION ALL
           SELECT f.job_id, 'no such job', 1 FROM probe_effect f
            WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = f.job_id)""",
    ),
    "outbox_drained": (
        "every outbox row was relayed",
        """SELECT id, job_id, action FROM job_outbox WHERE dispatched_at IS NULL""",
    ),
}


def run_sql_checks(names: Iterable[str] | None = None) -> list[Result]:
    results = []
    with connection.cursor() as cursor:
        for name in names or SQL_CHECKS:
            description, sql = SQL_CHECKS[name]
            cursor.execute(f"SELECT count(*) FROM ({sql}) AS broken")
            violations = cursor.fetchone()[0]
            examples = []
            if violations:
                cursor.execute(f"{sql} LIMIT 5")
                examples = [tuple(str(value) for value in row) for row in cursor.fetchall()]
            results.append(Result(name, description, violations, examples))
    return results


def check_log_trails() -> Result:
    """Each job's log rows, in insertion order, walk ``TRANSITIONS`` from 'enqueued' to its status.

    Rows are ordered by id: a transition's row is written while the job's row
    lock is held, so ids follow the order of the transitions on one job.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT id::text, status FROM jobs")
        statuses = dict(cursor.fetchall())
        cursor.execute("SELECT job_id::text, event FROM job_logs ORDER BY job_id, id")
        trails: dict[str, list[str]] = {}
        for job_id, event in cursor.fetchall():
            trails.setdefault(job_id, []).append(event)
    broken = []
    for job_id, status in statuses.items():
        error = _walk(trails.get(job_id, []), status)
        if error:
            broken.append((job_id, error))
    return Result(
        "log_trail_is_a_valid_path",
        "each job's log trail starts with 'enqueued', follows the state machine and ends at its status",
        len(broken),
        broken[:5],
    )


def _walk(events: list[str], final_status: str) -> str | None:
    if not events or events[0] != INITIAL_EVENT:
        return f"does not start with {INITIAL_EVENT!r}: {events[:3]}"
    state = Status.QUEUED
    for position, event in enumerate(events[1:], start=1):
        if event in NON_TRANSITION_EVENTS:
            continue
        if event not in TRANSITIONS:
            return f"unknown event {event!r} at {position}"
        sources, target = TRANSITIONS[event]
        if state not in sources:
            return f"{event!r} from {state} at {position}: {events}"
        state = target
    if state != final_status:
        return f"trail ends in {state}, job is {final_status}: {events}"
    return None


def check_redis_agrees(queues: dict[str, bool]) -> Result:
    """After a reconcile (workers stopped): every queued job is where it belongs, nothing else is."""
    from django.utils import timezone

    client = broker.get_client()
    with connection.cursor() as cursor:
        cursor.execute("SELECT id::text, queue, next_retry_at FROM jobs WHERE status = 'queued'")
        queued = {job_id: (queue, due) for job_id, queue, due in cursor.fetchall()}
    now = timezone.now()
    problems = []
    members: dict[str, dict[str, float | None]] = {}
    for queue, fifo in queues.items():
        members[broker.retry_key(queue)] = dict(
            client.zrange(broker.retry_key(queue), 0, -1, withscores=True)
        )
        ready = broker.ready_key(queue, fifo)
        members[ready] = (
            dict.fromkeys(client.lrange(ready, 0, -1))
            if fifo
            else dict(client.zrange(ready, 0, -1, withscores=True))
        )
        other = broker.ready_key(queue, not fifo)
        if client.exists(other):
            problems.append((other, "a ready structure this queue does not use holds ids"))
    for job_id, (queue, due) in queued.items():
        retry = members[broker.retry_key(queue)]
        ready = members[broker.ready_key(queue, queues[queue])]
        if due is not None and due > now:
            score = retry.get(job_id)
            if score is None or abs(score - broker.due_score(due)) > 0.001:
                problems.append((job_id, f"waiting until {due.isoformat()} but retry score is {score}"))
        elif job_id not in ready and job_id not in retry:
            problems.append((job_id, "due but in no ready structure"))
    for key, ids in members.items():
        for job_id in ids:
            if job_id not in queued:
                problems.append((job_id, f"in {key} but not a queued job"))
    return Result(
        "redis_agrees_after_one_reconcile",
        "after one reconcile every queued job is in Redis where it belongs, and no other id is",
        len(problems),
        problems[:5],
    )
