"""The invariants, checked in SQL over PostgreSQL plus the client's record and the execution journal.

The client's record and the journal are loaded into two tables of the run's
database (``chaos_submission``, ``chaos_execution``) so that each invariant
is one query returning its counter-examples. The log-trail walk and the
Redis comparison are done in Python against ``queue_app.states`` and
``queue_app.broker``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connection

from chaoslib.clients import Submission
from queue_app import broker
from queue_app.states import (
    INITIAL_EVENT,
    NON_TRANSITION_EVENTS,
    RUNNING,
    TERMINAL,
    TRANSITIONS,
    Status,
    initial_status,
)


@dataclass
class Result:
    name: str
    description: str
    violations: int
    examples: list = field(default_factory=list)
    checked: int | None = None  # how many things were examined (None: not countable)

    @property
    def passed(self) -> bool:
        return self.violations == 0


_TABLES = """
DROP TABLE IF EXISTS chaos_submission, chaos_execution, chaos_execution_claim;
CREATE TABLE chaos_submission (
    ref text PRIMARY KEY, channel text NOT NULL, idempotency_key text, outcome text NOT NULL,
    acked_ids uuid[] NOT NULL, tries int NOT NULL, far_future bool NOT NULL,
    allowed_statuses text[] NOT NULL, client_cancelled bool NOT NULL, unique_key text
);
CREATE TABLE chaos_execution (
    execution text PRIMARY KEY, job_id uuid NOT NULL, attempt int NOT NULL, fence bigint,
    pid int NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz, outcome text
);
CREATE INDEX ON chaos_execution (job_id);
"""

# Log events that end a claim's attempt: every transition out of 'processing' (a cancel
# request among them: the attempt must stop, and runs on only until its worker confirms).
ENDING_EVENTS = sorted(event for event, (sources, _) in TRANSITIONS.items() if Status.PROCESSING in sources)
# Log events that settle a job (its status becomes terminal).
SETTLING_EVENTS = sorted(event for event, (_, target) in TRANSITIONS.items() if target in TERMINAL)
# Log events that free a running job's slot (and its concurrency key's): out of processing or
# cancelling to a status that does not run.
SLOT_FREEING_EVENTS = sorted(
    event for event, (sources, target) in TRANSITIONS.items() if sources & RUNNING and target not in RUNNING
)

# Each execution with the claim it ran under and the log row that ended that claim's attempt.
# Its claim is the 'claimed' row of its job carrying its fence (unique per job; journals without
# a fence fall back to the latest claim of its attempt) written before it started; the end is
# the first row after that claim that leaves 'processing'. lease_expired_at: when a rescue
# found that claim's lease expired, before any later claim (requeued or failed from processing,
# or, asked to cancel first, its cancel confirmed: the 'cancelled' row that ends it is the rescue).
_EXECUTION_CLAIMS = """
CREATE TABLE chaos_execution_claim AS
SELECT e.execution, e.job_id, e.attempt, e.started_at, c.id AS claim_id, c.created_at AS claimed_at,
       x.event AS end_event, x.created_at AS ended_at, r.created_at AS lease_expired_at
  FROM chaos_execution e
  LEFT JOIN LATERAL (
        SELECT l.id, l.created_at FROM queue_app_job_logs l
         WHERE l.job_id = e.job_id AND l.event = 'claimed'
           AND (l.extra->>'attempt')::int = e.attempt AND l.created_at <= e.started_at
           AND (e.fence IS NULL OR (l.extra->>'fence')::bigint = e.fence)
         ORDER BY l.id DESC LIMIT 1) AS c ON true
  LEFT JOIN LATERAL (
        SELECT l.event, l.created_at FROM queue_app_job_logs l
         WHERE l.job_id = e.job_id AND l.id > c.id AND l.event = ANY(%(ending)s)
         ORDER BY l.id LIMIT 1) AS x ON true
  LEFT JOIN LATERAL (
        SELECT l.created_at FROM queue_app_job_logs l
         WHERE l.job_id = e.job_id AND l.id > c.id AND l.event LIKE 'lease_expired%%'
           AND NOT EXISTS (SELECT 1 FROM queue_app_job_logs n
                            WHERE n.job_id = e.job_id AND n.event = 'claimed' AND n.id > c.id AND n.id < l.id)
         ORDER BY l.id LIMIT 1) AS r ON true
"""


def load(submissions: Iterable[Submission], executions: Iterable[dict]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_TABLES)
        cursor.executemany(
            "INSERT INTO chaos_submission VALUES (%s, %s, %s, %s, %s::uuid[], %s, %s, %s, %s, %s)",
            [
                (
                    s.spec.ref,
                    s.spec.channel,
                    s.spec.key,
                    s.outcome,
                    s.acked_ids,
                    s.tries,
                    s.spec.far_future,
                    sorted(s.allowed_statuses()),
                    any(action == "cancel" for action, _, _ in s.actions),
                    s.spec.unique_key,
                )
                for s in submissions
            ],
        )
        cursor.executemany(
            "INSERT INTO chaos_execution VALUES (%s, %s, %s, %s, %s, to_timestamp(%s), to_timestamp(%s), %s)",
            [
                (
                    e["execution"],
                    e["job"],
                    e["attempt"],
                    e.get("fence"),
                    e["pid"],
                    e["at"],
                    e["ended_at"],
                    e["outcome"],
                )
                for e in executions
            ],
        )
        cursor.execute(_EXECUTION_CLAIMS, {"ending": ENDING_EVENTS})


# Pairs of executions of one job that ran at the same time (a figure, not an invariant: a worker
# paused mid-handler overlaps the next attempt; what matters is that it started in time and its
# writes are fenced, which the checks below hold).
OVERLAPPING_EXECUTIONS = """chaos_execution e1
             JOIN chaos_execution e2 ON e2.job_id = e1.job_id
              AND (e1.attempt, e1.started_at, e1.execution) < (e2.attempt, e2.started_at, e2.execution)
              AND e2.started_at < coalesce(e1.ended_at, 'infinity')
              AND e1.started_at < coalesce(e2.ended_at, 'infinity')"""

# An execution that wrote the job's result or a side effect.
_WROTE = """(j.result->>'execution' = e.execution
             OR EXISTS (SELECT 1 FROM probe_effect f WHERE f.execution = e.execution))"""


@dataclass(frozen=True)
class Check:
    description: str
    checked: str  # a query counting what was examined
    violations: str  # a query returning the counter-examples


# name -> the check. Parameters: %(cancel_race_seconds)s, %(settling)s (SETTLING_EVENTS),
# %(slot_freeing)s (SLOT_FREEING_EVENTS).
SQL_CHECKS: dict[str, Check] = {
    "no_acknowledged_submission_lost": Check(
        "every job id an acknowledgement named exists",
        "SELECT count(*) FROM chaos_submission s, unnest(s.acked_ids)",
        """SELECT s.ref, a.id FROM chaos_submission s, unnest(s.acked_ids) AS a(id)
            WHERE NOT EXISTS (SELECT 1 FROM queue_app_jobs j WHERE j.id = a.id)""",
    ),
    "acknowledgements_name_the_submitted_job": Check(
        "an acknowledged id is the job of that submission (or, for a unique job, the job holding"
        " its unique key), and repeats name the same job",
        "SELECT count(*) FROM chaos_submission s, unnest(s.acked_ids)",
        """SELECT s.ref, a.id, j.payload->>'ref' FROM chaos_submission s, unnest(s.acked_ids) AS a(id)
             JOIN queue_app_jobs j ON j.id = a.id WHERE j.payload->>'ref' IS DISTINCT FROM s.ref
              AND (s.unique_key IS NULL OR j.unique_key IS DISTINCT FROM s.unique_key)
           UNION ALL
           SELECT s.ref, NULL, array_to_string(s.acked_ids, ',') FROM chaos_submission s
            WHERE (SELECT count(DISTINCT x) FROM unnest(s.acked_ids) AS x) > 1""",
    ),
    "no_unexpected_job": Check(
        "every job comes from a submission the client made",
        "SELECT count(*) FROM queue_app_jobs",
        """SELECT j.id, j.payload->>'ref' FROM queue_app_jobs j
            WHERE NOT EXISTS (SELECT 1 FROM chaos_submission s WHERE s.ref = j.payload->>'ref')""",
    ),
    "one_job_per_submission_and_key": Check(
        "a submission (and so an idempotency key) made at most one job",
        "SELECT count(*) FROM queue_app_jobs",
        """SELECT payload->>'ref', count(*) FROM queue_app_jobs GROUP BY 1 HAVING count(*) > 1
           UNION ALL
           SELECT idempotency_key, count(*) FROM queue_app_jobs WHERE idempotency_key IS NOT NULL
            GROUP BY 1 HAVING count(*) > 1""",
    ),
    "every_job_ends_as_expected": Check(
        "a job ends failed only if its payload fails every attempt, cancelled only if a client"
        " cancelled it (and did not retry it), and completed otherwise",
        "SELECT count(*) FROM queue_app_jobs",
        """SELECT j.id, j.status, s.allowed_statuses FROM queue_app_jobs j
             JOIN chaos_submission s ON s.ref = j.payload->>'ref'
            WHERE j.status <> ALL(s.allowed_statuses)""",
    ),
    "attempts_within_max": Check(
        "attempts never exceed max_attempts (nor do claims or journaled executions)",
        "SELECT (SELECT count(*) FROM queue_app_jobs) + (SELECT count(*) FROM chaos_execution)",
        """SELECT id, attempts, max_attempts FROM queue_app_jobs WHERE attempts > max_attempts
           UNION ALL
           SELECT e.job_id, e.attempt, j.max_attempts
             FROM chaos_execution e JOIN queue_app_jobs j ON j.id = e.job_id
            WHERE e.attempt > j.max_attempts
           UNION ALL
           SELECT l.job_id, (l.extra->>'attempt')::int, j.max_attempts FROM queue_app_job_logs l
             JOIN queue_app_jobs j ON j.id = l.job_id
            WHERE l.event = 'claimed' AND (l.extra->>'attempt')::int > j.max_attempts""",
    ),
    "completed_by_its_last_attempt": Check(
        "a completed job has one 'completed' log row, and it, the result and the completing"
        " execution all carry the job's last attempt (the execution also its last fence)",
        "SELECT count(*) FROM queue_app_jobs WHERE status = 'completed'",
        """SELECT j.id, j.attempts, j.result FROM queue_app_jobs j
            WHERE j.status = 'completed' AND (
                  (j.result->>'attempt')::int IS DISTINCT FROM j.attempts
               OR (SELECT count(*) FROM queue_app_job_logs l
                    WHERE l.job_id = j.id AND l.event = 'completed') <> 1
               OR NOT EXISTS (SELECT 1 FROM queue_app_job_logs l
                               WHERE l.job_id = j.id AND l.event = 'completed'
                                 AND (l.extra->>'attempt')::int = j.attempts)
               OR NOT EXISTS (SELECT 1 FROM chaos_execution e WHERE e.execution = j.result->>'execution'
                                 AND e.job_id = j.id AND e.attempt = j.attempts
                                 AND coalesce(e.fence, j.fence) = j.fence
                                 AND e.outcome = 'returned'))""",
    ),
    "fence_goes_up_one_per_claim": Check(
        "jobs.fence only goes up, by one per claim: a job's 'claimed' rows carry fences 1, 2, ...,"
        " n in log order (so each is unique), jobs.fence is n, and attempts never exceed it",
        "SELECT count(*) FROM queue_app_jobs",
        """SELECT j.id, j.fence, j.attempts, c.fences FROM queue_app_jobs j
             CROSS JOIN LATERAL (
                   SELECT coalesce(array_agg((l.extra->>'fence')::bigint ORDER BY l.id), '{}') AS fences
                     FROM queue_app_job_logs l WHERE l.job_id = j.id AND l.event = 'claimed') AS c
            WHERE c.fences <> ARRAY(SELECT generate_series(1, j.fence))::bigint[]
               OR j.attempts > j.fence""",
    ),
    "poison_jobs_fail_with_attempts_charged": Check(
        "a poison job (its handler raises SystemExit, calls os._exit or SIGKILLs its process on"
        " every attempt) ends failed with max_attempts charged (or cancelled by a client), and"
        " runs no more often than that",
        "SELECT count(*) FROM queue_app_jobs WHERE type = 'probe.chaos_poison'",
        """SELECT j.id, j.payload->>'poison', j.status, j.attempts, j.max_attempts,
                  (SELECT count(*) FROM chaos_execution e WHERE e.job_id = j.id) AS runs
             FROM queue_app_jobs j
            WHERE j.type = 'probe.chaos_poison' AND (
                  (j.status = 'failed' AND j.attempts <> j.max_attempts)
               OR j.status NOT IN ('failed', 'cancelled')
               OR (SELECT count(*) FROM chaos_execution e WHERE e.job_id = j.id) > j.max_attempts)""",
    ),
    "every_execution_has_its_claim": Check(
        "every journaled execution started after the 'claimed' row of its job, attempt and fence",
        "SELECT count(*) FROM chaos_execution_claim",
        """SELECT job_id, execution, attempt, started_at FROM chaos_execution_claim
            WHERE claim_id IS NULL""",
    ),
    "one_execution_per_claim": Check(
        "no claim ran its job twice",
        "SELECT count(DISTINCT claim_id) FROM chaos_execution_claim",
        """SELECT job_id, claim_id, count(*) FROM chaos_execution_claim WHERE claim_id IS NOT NULL
            GROUP BY job_id, claim_id HAVING count(*) > 1""",
    ),
    "no_execution_after_its_attempt_ended": Check(
        "no execution starts after the log row that ended its attempt (completion, failure, retry,"
        " lease expiry, hand-back), whatever it wrote; cancels are counted below",
        "SELECT count(*) FROM chaos_execution_claim",
        """SELECT job_id, execution, attempt, end_event, ended_at, started_at FROM chaos_execution_claim
            WHERE end_event IS DISTINCT FROM 'cancel_requested' AND started_at >= ended_at""",
    ),
    "cancel_race_bounded": Check(
        "the cancel-after-claim race (counted as checked): an execution that starts after a cancel"
        " ended its attempt is of a job a client cancelled, starts within one heartbeat (+1 s) of"
        " the cancel, and writes neither result nor effect",
        """SELECT count(*) FROM chaos_execution_claim
            WHERE end_event = 'cancel_requested' AND started_at >= ended_at""",
        f"""SELECT e.job_id, e.execution, e.started_at - e.ended_at AS late_by, s.client_cancelled
             FROM chaos_execution_claim e JOIN queue_app_jobs j ON j.id = e.job_id
             JOIN chaos_submission s ON s.ref = j.payload->>'ref'
            WHERE e.end_event = 'cancel_requested' AND e.started_at >= e.ended_at
              AND (NOT s.client_cancelled
                   OR e.started_at > e.ended_at + make_interval(secs => %(cancel_race_seconds)s)
                   OR {_WROTE})""",
    ),
    "no_two_executions_overlap": Check(
        "no two executions of one job run at the same time, whatever the handler catches (a"
        " cancel, then a retry, included), unless the earlier one's lease expired (a rescue"
        " requeued or failed it, or confirmed the cancel it was asked for): its process was paused"
        " or cut off from PostgreSQL, and its writes are fenced",
        "SELECT count(*) FROM chaos_execution",
        # An execution killed with its process journaled no end: the row that ended its
        # attempt (written once the process was found dead) bounds it instead.
        """SELECT e1.job_id, e1.execution, e2.execution, c1.end_event
             FROM chaos_execution e1
             JOIN chaos_execution_claim c1 ON c1.execution = e1.execution
             JOIN chaos_execution e2 ON e2.job_id = e1.job_id
              AND (e1.attempt, e1.started_at, e1.execution) < (e2.attempt, e2.started_at, e2.execution)
              AND e2.started_at < coalesce(e1.ended_at, c1.ended_at, 'infinity')
              AND e1.started_at < coalesce(e2.ended_at, 'infinity')
            WHERE c1.lease_expired_at IS NULL""",
    ),
    "effect_exactly_once_per_completed_job": Check(
        "a probe.chaos job's side effect exists once if it completed (by the completing"
        " execution), never otherwise",
        "SELECT count(*) FROM queue_app_jobs WHERE type = 'probe.chaos'",
        """SELECT j.id, j.status, count(f.id) FROM queue_app_jobs j
             LEFT JOIN probe_effect f ON f.job_id = j.id
            WHERE j.type = 'probe.chaos'
            GROUP BY j.id, j.status, j.result
           HAVING count(f.id) <> CASE WHEN j.status = 'completed' THEN 1 ELSE 0 END
               OR (j.status = 'completed' AND NOT bool_and(f.execution = j.result->>'execution'))
           UNION ALL
           SELECT f.job_id, 'no such job', 1 FROM probe_effect f
            WHERE NOT EXISTS (SELECT 1 FROM queue_app_jobs j WHERE j.id = f.job_id)""",
    ),
    # --- workflows and batches (scripts/chaoslib/workflows.py) ---
    "callbacks_run_iff_policy": Check(
        "every job that waited on others (a workflow step, a chord or batch callback) was decided"
        " by its policy over its dependencies' ends: if it says run (cancel: all completed;"
        " continue: always; only_on_failure: one did not complete), it was released exactly once,"
        " ran, and completed at most once; else it was cancelled as dependency_failed, never"
        " released, claimed nor run",
        "SELECT count(*) FROM queue_app_job_waits",
        """WITH decided AS (
               SELECT w.job_id, w.on_failure,
                      bool_and(p.status = 'completed') AS all_completed,
                      bool_and(p.status IN ('completed', 'failed', 'cancelled', 'expired')) AS all_settled
                 FROM queue_app_job_waits w
                 JOIN queue_app_job_dependencies d ON d.job_id = w.job_id
                 JOIN queue_app_jobs p ON p.id = d.depends_on_id
                GROUP BY w.job_id, w.on_failure
           ), seen AS (
               SELECT x.job_id, x.on_failure, x.all_settled, j.status,
                      CASE x.on_failure WHEN 'cancel' THEN x.all_completed
                                        WHEN 'continue' THEN true
                                        ELSE NOT x.all_completed END AS should_run,
                      (SELECT count(*) FROM queue_app_job_logs l
                          WHERE l.job_id = x.job_id AND l.event = 'released')
                          AS releases,
                      (SELECT count(*) FROM queue_app_job_logs l
                          WHERE l.job_id = x.job_id AND l.event = 'completed')
                          AS completions,
                      (SELECT count(*) FROM queue_app_job_logs l
                          WHERE l.job_id = x.job_id AND l.event = 'claimed')
                          AS claims,
                      (SELECT count(*) FROM queue_app_job_logs l WHERE l.job_id = x.job_id
                          AND l.event = 'dependency_failed') AS dependency_failed,
                      (SELECT count(*) FROM chaos_execution e WHERE e.job_id = x.job_id) AS runs
                 FROM decided x JOIN queue_app_jobs j ON j.id = x.job_id
           )
           SELECT job_id, on_failure, should_run, status, releases, completions, claims, runs FROM seen
            WHERE NOT all_settled
               OR (should_run AND (releases <> 1 OR claims < 1 OR runs < 1 OR completions > 1
                                   OR status NOT IN ('completed', 'failed')
                                   OR completions <> (status = 'completed')::int))
               OR (NOT should_run AND (status <> 'cancelled' OR releases <> 0 OR claims <> 0
                                       OR runs <> 0 OR dependency_failed <> 1))""",
    ),
    "no_dependent_started_before_its_dependencies": Check(
        "no job with dependencies was claimed (log order) or started (journal) before each of"
        " its dependencies had settled, nor, under the cancel policy, unless each completed",
        "SELECT count(*) FROM queue_app_job_dependencies",
        """WITH edge AS (
               SELECT d.job_id, d.depends_on_id, w.on_failure, p.status AS parent_status,
                      (SELECT min(l.id) FROM queue_app_job_logs l WHERE l.job_id = d.depends_on_id
                          AND l.event = ANY(%(settling)s)) AS settled_row,
                      (SELECT min(l.created_at) FROM queue_app_job_logs l WHERE l.job_id = d.depends_on_id
                          AND l.event = ANY(%(settling)s)) AS settled_at
                 FROM queue_app_job_dependencies d
                 JOIN queue_app_job_waits w ON w.job_id = d.job_id
                 JOIN queue_app_jobs p ON p.id = d.depends_on_id
           )
           SELECT e.job_id, e.depends_on_id, 'claimed', c.id::text, e.settled_row::text, e.parent_status
             FROM edge e JOIN queue_app_job_logs c ON c.job_id = e.job_id AND c.event = 'claimed'
            WHERE e.settled_row IS NULL OR c.id < e.settled_row
               OR (e.on_failure = 'cancel' AND e.parent_status <> 'completed')
           UNION ALL
           SELECT e.job_id, e.depends_on_id, 'started', x.started_at::text, e.settled_at::text,
                  e.parent_status
             FROM edge e JOIN chaos_execution x ON x.job_id = e.job_id
            WHERE e.settled_at IS NULL OR x.started_at < e.settled_at""",
    ),
    "no_step_left_waiting": Check(
        "once every job settled, no job is left waiting (its dependencies all settled, the"
        " transaction that settled the last one had to decide it)",
        "SELECT count(*) FROM queue_app_job_waits",
        """SELECT j.id, j.type, j.payload->>'ref',
                  (SELECT string_agg(p.status, ',') FROM queue_app_job_dependencies d
                     JOIN queue_app_jobs p ON p.id = d.depends_on_id WHERE d.job_id = j.id) AS dependencies
             FROM queue_app_jobs j WHERE j.status = 'waiting'""",
    ),
    # --- job controls (scripts/chaoslib/controls.py) ---
    "unique_key_held_by_one_live_job": Check(
        "no two jobs with one unique key (and owner) were live at once: each is live from its"
        " 'enqueued' log row to the row that settled it (log order), and those spans never"
        " overlap (the run's unique jobs use the default scope: every status but waiting and"
        " the terminal ones, no period)",
        "SELECT count(*) FROM queue_app_jobs WHERE unique_key IS NOT NULL",
        """WITH live AS (
               SELECT j.id, j.unique_key, j.owner_id,
                      (SELECT min(l.id) FROM queue_app_job_logs l
                          WHERE l.job_id = j.id AND l.event = 'enqueued')
                          AS from_row,
                      coalesce((SELECT min(l.id) FROM queue_app_job_logs l WHERE l.job_id = j.id
                                   AND l.event = ANY(%(settling)s)), 9223372036854775807) AS to_row
                 FROM queue_app_jobs j WHERE j.unique_key IS NOT NULL
           )
           SELECT a.unique_key, a.id, b.id FROM live a
             JOIN live b ON b.unique_key = a.unique_key AND b.owner_id IS NOT DISTINCT FROM a.owner_id
              AND a.id < b.id
            WHERE a.from_row < b.to_row AND b.from_row < a.to_row""",
    ),
    "key_running_limit_held": Check(
        "no concurrency key ever had more jobs running than its queue's key_concurrency_limit:"
        " at each claim (log order), the key's jobs claimed and not yet out of processing or"
        " cancelling number at most the limit",
        """SELECT count(*) FROM queue_app_job_logs l JOIN queue_app_jobs j ON j.id = l.job_id
            WHERE l.event = 'claimed' AND j.concurrency_key IS NOT NULL""",
        """WITH slot AS (
               SELECT j.id, j.queue, j.concurrency_key, c.id AS claim_row,
                      coalesce((SELECT min(l.id) FROM queue_app_job_logs l
                          WHERE l.job_id = j.id AND l.id > c.id
                                   AND l.event = ANY(%(slot_freeing)s)), 9223372036854775807) AS free_row
                 FROM queue_app_jobs j JOIN queue_app_job_logs c ON c.job_id = j.id AND c.event = 'claimed'
                WHERE j.concurrency_key IS NOT NULL
           )
           SELECT s.queue, s.concurrency_key, s.id, s.claim_row, count(*) AS running, q.key_concurrency_limit
             FROM slot s
             JOIN queue_app_job_queues q ON q.name = s.queue
             JOIN slot o ON o.queue = s.queue AND o.concurrency_key = s.concurrency_key
              AND o.claim_row <= s.claim_row AND o.free_row > s.claim_row
            WHERE q.key_concurrency_limit IS NOT NULL
            GROUP BY s.queue, s.concurrency_key, s.id, s.claim_row, q.key_concurrency_limit
           HAVING count(*) > q.key_concurrency_limit""",
    ),
    "no_expired_job_started": Check(
        "no attempt of a job with an expiry was claimed at or after its expires_at (the claim's"
        " own clock, as the claim decides), and a job expired only from queued, never while an"
        " attempt ran; an attempt begun before the expiry may have run (then handed back or"
        " retried, the job expires instead of starting again)",
        "SELECT count(*) FROM queue_app_jobs WHERE expires_at IS NOT NULL",
        """SELECT j.id, j.status, 'claimed at ' || l.created_at::text || ', expires at ' || j.expires_at::text
             FROM queue_app_jobs j JOIN queue_app_job_logs l ON l.job_id = j.id AND l.event = 'claimed'
            WHERE j.expires_at IS NOT NULL AND l.created_at >= j.expires_at
           UNION ALL
           SELECT j.id, j.status, 'expired while its attempt ' || c.attempt::text || ' ran'
             FROM queue_app_jobs j JOIN chaos_execution_claim c ON c.job_id = j.id
            WHERE j.status = 'expired' AND c.end_event IS NULL""",
    ),
}


def run_sql_checks(*, cancel_race_seconds: float, names: Iterable[str] | None = None) -> list[Result]:
    params = {
        "cancel_race_seconds": cancel_race_seconds,
        "settling": SETTLING_EVENTS,
        "slot_freeing": SLOT_FREEING_EVENTS,
    }
    results = []
    with connection.cursor() as cursor:
        for name in names or SQL_CHECKS:
            check = SQL_CHECKS[name]
            cursor.execute(check.checked)
            checked = cursor.fetchone()[0]
            cursor.execute(f"SELECT count(*) FROM ({check.violations}) AS broken", params)
            violations = cursor.fetchone()[0]
            examples = []
            if violations:
                cursor.execute(f"{check.violations} LIMIT 5", params)
                examples = [tuple(str(value) for value in row) for row in cursor.fetchall()]
            results.append(Result(name, check.description, violations, examples, checked))
    return results


def check_log_trails() -> Result:
    """Each job's log rows, in insertion order, walk ``TRANSITIONS`` from 'enqueued' (queued, or
    waiting for a job with dependencies) to its status.

    Rows are ordered by id: a transition's row is written while the job's row
    lock is held, so ids follow the order of the transitions on one job.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT id::text, status FROM queue_app_jobs")
        statuses = dict(cursor.fetchall())
        cursor.execute(
            "SELECT job_id::text, event, CASE WHEN event = %s THEN extra END"
            " FROM queue_app_job_logs ORDER BY job_id, id",
            [INITIAL_EVENT],
        )
        trails: dict[str, list[str]] = {}
        starts: dict[str, str] = {}
        for job_id, event, extra in cursor.fetchall():
            trail = trails.setdefault(job_id, [])
            if not trail:
                # A raw cursor hands jsonb over as text.
                starts[job_id] = initial_status(json.loads(extra) if isinstance(extra, str) else extra)
            trail.append(event)
    broken = []
    for job_id, status in statuses.items():
        error = _walk(trails.get(job_id, []), status, starts.get(job_id, Status.QUEUED))
        if error:
            broken.append((job_id, error))
    return Result(
        "log_trail_is_a_valid_path",
        "each job's log trail starts with 'enqueued' (in the status its extra names: queued, or"
        " waiting), follows the state machine and ends at its status",
        len(broken),
        broken[:5],
        len(statuses),
    )


def _walk(events: list[str], final_status: str, start: str = Status.QUEUED) -> str | None:
    """What is wrong with a trail that starts in ``start`` (``initial_status`` of its first
    row), or None."""
    if not events or events[0] != INITIAL_EVENT:
        return f"does not start with {INITIAL_EVENT!r}: {events[:3]}"
    state = start
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


def _inflight_problems(client, queue: str, now: float) -> tuple[dict[str, float], list[tuple]]:
    """The in-flight ids of ``queue`` (id -> deadline) and what is wrong with them.

    After a clean stop nothing is in flight, except ids a killed worker popped in the
    last seconds: each must have a deadline no later than ``INFLIGHT_SECONDS`` from now,
    so the next worker's sweep gives it back (and the claim drops it if its job is done).
    The hash of their places (score and member) holds only in-flight ids.
    """
    key = broker.inflight_key(queue)
    inflight = dict(client.zrange(key, 0, -1, withscores=True))
    problems = [
        (job_id, f"in {key} with a deadline {deadline - now:.1f} s away, which never comes soon")
        for job_id, deadline in inflight.items()
        if deadline > now + broker.INFLIGHT_SECONDS + 1.0
    ]
    scores_key = broker.inflight_places_key(queue)
    problems += [
        (job_id, f"in {scores_key} but not in flight")
        for job_id in client.hkeys(scores_key)
        if job_id not in inflight
    ]
    return inflight, problems


def _wake_problems(client, queue: str) -> list[tuple]:
    """The wake key is a list of at most one token (idle workers block on it)."""
    key = broker.wake_key(queue)
    kind = client.type(key)
    length = client.llen(key) if kind == "list" else 0
    if kind not in ("none", "list") or length > 1:
        return [(key, f"a wake key must be a list of at most one token: {kind} of {length}")]
    return []


def check_redis_agrees(queues: dict[str, bool]) -> Result:
    """After a reconcile (workers stopped): every queued job is where it belongs, once, with its
    exact score, and nothing else is in Redis.

    Ready ids in a priority set must carry ``ready_score(priority_value)`` and the member
    ``ready_member(id, enqueued_at)``; waiting ids the
    due time. An id may sit in one structure of one queue, once. An id in flight (popped by a
    worker killed before its claim) counts as present, and is no duplicate of a ready copy (the
    relay's at-least-once re-send): it goes back to ready at its deadline, which must come soon.
    The wake keys are lists of at most one token. Any other queue key that does not expire
    (the reconciler's staging keys do) is reported too.
    """
    from django.utils import timezone

    client = broker.get_client()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id::text, queue, priority_value, enqueued_at, next_retry_at "
            "FROM queue_app_jobs WHERE status = 'queued'"
        )
        queued = {row[0]: row[1:] for row in cursor.fetchall()}
    now = timezone.now()
    redis_now = _redis_time(client)
    problems = []
    # key -> id -> score (None in a list); every occurrence of an id, duplicates included.
    members: dict[str, dict[str, float | None]] = {}
    places: dict[str, list[str]] = {}
    # priority set key -> id -> its member there.
    ready_members: dict[str, dict[str, str]] = {}
    inflight: dict[str, dict[str, float]] = {}
    known_keys = set()
    for queue, fifo in queues.items():
        retry = broker.retry_key(queue)
        members[retry] = dict(client.zrange(retry, 0, -1, withscores=True))
        ready = broker.ready_key(queue, fifo)
        if fifo:
            listed = client.lrange(ready, 0, -1)
            members[ready] = dict.fromkeys(listed)
            for job_id in {i for i in listed if listed.count(i) > 1}:
                problems.append((job_id, f"{listed.count(job_id)} times in {ready}"))
        else:
            scored = client.zrange(ready, 0, -1, withscores=True)
            members[ready] = {broker.member_job_id(member): score for member, score in scored}
            ready_members[ready] = {broker.member_job_id(member): member for member, _ in scored}
            if len(members[ready]) < len(scored):
                problems.append((ready, "an id has several members"))
        other = broker.ready_key(queue, not fifo)
        if client.exists(other):
            problems.append((other, "a ready structure this queue does not use holds ids"))
        inflight[queue], found = _inflight_problems(client, queue, redis_now)
        problems += found + _wake_problems(client, queue)
        known_keys |= {broker.inflight_key(queue), broker.inflight_places_key(queue), broker.wake_key(queue)}
    for key, ids in members.items():
        for job_id in ids:
            places.setdefault(job_id, []).append(key)
    for job_id, keys in places.items():
        if len(keys) > 1:
            problems.append((job_id, f"in several structures: {keys}"))
    for job_id, (queue, priority_value, enqueued_at, due) in queued.items():
        retry = members[broker.retry_key(queue)]
        ready_key = broker.ready_key(queue, queues[queue])
        ready = members[ready_key]
        if due is not None and due > now:
            score = retry.get(job_id)
            if score is None or abs(score - broker.due_score(due)) > 0.001:
                problems.append((job_id, f"waiting until {due.isoformat()} but retry score is {score}"))
        elif job_id in ready:
            expected = None if queues[queue] else broker.ready_score(priority_value)
            if ready[job_id] != expected:
                problems.append((job_id, f"score {ready[job_id]} in {ready_key}, expected {expected}"))
            member = ready_members.get(ready_key, {}).get(job_id)
            if member is not None and member != broker.ready_member(job_id, enqueued_at):
                problems.append((job_id, f"member {member} in {ready_key}, not at its enqueue time"))
        elif job_id not in retry and job_id not in inflight[queue]:
            problems.append((job_id, "due but in no ready structure and not in flight"))
    for key, ids in members.items():
        for job_id in ids:
            if job_id not in queued:
                problems.append((job_id, f"in {key} but not a queued job"))
    for key in client.scan_iter(match=broker.all_keys_pattern()):
        if key not in members and key not in known_keys and client.ttl(key) == -1:
            problems.append((key, "an unknown queue key that never expires"))
    return Result(
        "redis_agrees_after_one_reconcile",
        "after one reconcile every queued job is in Redis where it belongs (or in flight), once,"
        " with its exact score; in-flight ids are due back soon, wake keys hold one token at most,"
        " and no other id or lasting key is",
        len(problems),
        problems[:5],
        len(queued) + sum(len(ids) for ids in members.values()) + sum(len(ids) for ids in inflight.values()),
    )


def _redis_time(client) -> float:
    """Redis's clock, which set the in-flight deadlines."""
    seconds, microseconds = client.time()
    return seconds + microseconds / 1_000_000


def _fifo_problems(client, queue: str) -> list[tuple]:
    """A FIFO list may still hold ids of cancelled jobs: a cancel does not walk the list (that
    is O(its length) in Redis), the next pop or reconcile drops them. Any other id is a finding."""
    key = broker.fifo_key(queue)
    ids = client.lrange(key, 0, -1)
    if not ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id::text FROM queue_app_jobs WHERE id::text = ANY(%s) AND status = 'cancelled'", [ids]
        )
        cancelled = {row[0] for row in cursor.fetchall()}
    return [(key, job_id) for job_id in ids if job_id not in cancelled]


def check_redis_empty(queues: dict[str, bool]) -> Result:
    """Once every job is terminal and the relays drained the outbox, Redis holds no queue key,
    except a wake token per queue, in-flight ids due back soon (popped by a worker killed in
    the last seconds; the next worker's sweep returns them and its claim drops them) and, in
    a FIFO list, ids of cancelled jobs."""
    client = broker.get_client()
    allowed = set()
    problems = []
    now = _redis_time(client)
    for queue, fifo in queues.items():
        _, found = _inflight_problems(client, queue, now)
        problems += found + _wake_problems(client, queue)
        allowed |= {broker.inflight_key(queue), broker.inflight_places_key(queue), broker.wake_key(queue)}
        if fifo:
            problems += _fifo_problems(client, queue)
            allowed.add(broker.fifo_key(queue))
    problems += [
        (key, client.type(key))
        for key in client.scan_iter(match=broker.all_keys_pattern())
        if key not in allowed and client.ttl(key) == -1
    ]
    return Result(
        "redis_empty_when_all_jobs_ended",
        "after the last jobs were cancelled and their removals relayed, no queue key is left"
        " but wake tokens, in-flight ids due back soon and cancelled jobs' ids in FIFO lists",
        len(problems),
        problems[:5],
    )
