"""The figures a chaos run prints: what was done to the system, and what the system did."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db import connection

from chaoslib.clients import Submission
from chaoslib.invariants import OVERLAPPING_EXECUTIONS, SETTLING_EVENTS, Result


@dataclass
class Figures:
    """Filled in as the run goes; ``collect`` adds what the database says at the end."""

    seed: int
    jobs_planned: int
    stores: str
    faults_planned: Counter = field(default_factory=Counter)
    faults_applied: Counter = field(default_factory=Counter)
    faults_skipped: Counter = field(default_factory=Counter)
    failpoint_kills: int = 0
    pop_failpoint_kills: int = 0
    unexpected_exits: list = field(default_factory=list)
    submissions: list[Submission] = field(default_factory=list)
    api_actions: Counter = field(default_factory=Counter)
    api_retried_errors: Counter = field(default_factory=Counter)
    seconds_to_terminal: float | None = None
    # When they did not all end within --settle-timeout: the limit, and how many had not.
    settle_timeout: float = 0.0
    unsettled_at_timeout: int = 0
    total_seconds: float = 0.0
    reconcile_summary: str = ""
    # (kind, epoch seconds) of every applied fault.
    fault_timeline: list = field(default_factory=list)
    database: dict = field(default_factory=dict)


_DATABASE_FIGURES = {
    "jobs": "SELECT count(*) FROM queue_app_jobs",
    "executions": "SELECT count(*) FROM chaos_execution",
    "executed_jobs": "SELECT count(DISTINCT job_id) FROM chaos_execution",
    "completion_fenced": "SELECT count(*) FROM queue_app_job_logs WHERE event = 'completion_fenced'",
    "failure_fenced": "SELECT count(*) FROM queue_app_job_logs WHERE event = 'failure_fenced'",
    "lease_expired": "SELECT count(*) FROM queue_app_job_logs WHERE event LIKE 'lease_expired%'",
    "recovered_on_restart": "SELECT count(*) FROM queue_app_job_logs WHERE message LIKE 'worker restarted%'",
    "handed_back": "SELECT count(*) FROM queue_app_job_logs WHERE event = 'handed_back'",
    "poison": """SELECT coalesce(string_agg(way || '=' || n, ', ' ORDER BY way), 'none') FROM (
                   SELECT payload->>'poison' || ':' || status AS way, count(*) AS n FROM queue_app_jobs
                    WHERE type = 'probe.chaos_poison' GROUP BY 1) AS ways""",
    "workflow_steps": """SELECT coalesce(string_agg(status || '=' || n, ', ' ORDER BY status), 'none') FROM (
                           SELECT j.status, count(*) AS n
                             FROM queue_app_jobs j JOIN queue_app_job_waits w ON w.job_id = j.id
                            GROUP BY 1) AS steps""",
    "released": "SELECT count(*) FROM queue_app_job_logs WHERE event = 'released'",
    "dependency_failed": "SELECT count(*) FROM queue_app_job_logs WHERE event = 'dependency_failed'",
    "snoozed": "SELECT count(*) FROM queue_app_job_logs WHERE event = 'snoozed'",
    "expired": "SELECT count(*) FROM queue_app_jobs WHERE status = 'expired'",
    "unique_jobs": "SELECT count(*) FROM queue_app_jobs WHERE unique_key IS NOT NULL",
    "keyed_jobs": "SELECT count(*) FROM queue_app_jobs WHERE concurrency_key IS NOT NULL",
    "overlapping_pairs": f"SELECT count(*) FROM {OVERLAPPING_EXECUTIONS}",
    "cancel_races": """SELECT count(*) FROM chaos_execution_claim
                        WHERE end_event = 'cancel_requested' AND started_at >= ended_at""",
    "killed_mid_handler": "SELECT count(*) FROM chaos_execution WHERE ended_at IS NULL",
    # A run after one that ended other than by the handler's own (deliberate) failure.
    "redelivered": """
        SELECT count(*) FROM (
            SELECT lag(outcome, 1, 'first')
                       OVER (PARTITION BY job_id ORDER BY started_at, execution) AS previous
              FROM chaos_execution) AS runs
         WHERE previous IS DISTINCT FROM 'first' AND previous IS DISTINCT FROM 'RuntimeError'""",
}


# Per fault kind: how many of its faults came while a workflow step was unsettled, and how many
# while a step was released (its dependencies done) but not yet claimed: the window in which
# a lost dependent would never run.
_FAULTS_IN_WORKFLOWS = """
WITH fault AS (SELECT * FROM unnest(%(kinds)s::text[], %(times)s::float8[]) AS f(kind, at)),
step AS (
    SELECT j.id, extract(epoch FROM j.created_at)::float8 AS created,
           (SELECT extract(epoch FROM min(l.created_at))::float8 FROM queue_app_job_logs l
             WHERE l.job_id = j.id AND l.event = ANY(%(settling)s)) AS settled,
           (SELECT extract(epoch FROM min(l.created_at))::float8 FROM queue_app_job_logs l
             WHERE l.job_id = j.id AND l.event = 'released') AS released,
           (SELECT extract(epoch FROM min(l.created_at))::float8 FROM queue_app_job_logs l
             WHERE l.job_id = j.id AND l.event = 'claimed') AS claimed
      FROM queue_app_jobs j WHERE EXISTS (SELECT 1 FROM queue_app_job_waits w WHERE w.job_id = j.id)
)
SELECT f.kind,
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM step s WHERE s.created <= f.at
                                         AND coalesce(s.settled, 'infinity') > f.at)),
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM step s WHERE s.released <= f.at
                                         AND coalesce(s.claimed, 'infinity') > f.at))
  FROM fault f GROUP BY f.kind ORDER BY f.kind
"""


def collect(figures: Figures) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            _FAULTS_IN_WORKFLOWS,
            {
                "kinds": [kind for kind, _ in figures.fault_timeline],
                "times": [at for _, at in figures.fault_timeline],
                "settling": SETTLING_EVENTS,
            },
        )
        figures.database["faults_in_workflows"] = {
            kind: (in_flight, released) for kind, in_flight, released in cursor.fetchall()
        }
        for name, sql in _DATABASE_FIGURES.items():
            cursor.execute(sql)
            figures.database[name] = cursor.fetchone()[0]
        cursor.execute("SELECT status, count(*) FROM queue_app_jobs GROUP BY 1 ORDER BY 1")
        figures.database["statuses"] = dict(cursor.fetchall())
        cursor.execute(
            """SELECT n, count(*) FROM (SELECT count(*) AS n FROM chaos_execution GROUP BY job_id) AS per_job
               GROUP BY n ORDER BY n"""
        )
        figures.database["executions_per_job"] = dict(cursor.fetchall())


def _counter(counter: Counter) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted(counter.items(), key=str)) or "none"


def render(figures: Figures, results: list[Result]) -> str:
    db = figures.database
    outcomes = Counter(s.outcome for s in figures.submissions)
    channels = Counter(s.spec.channel for s in figures.submissions)
    acked = [s for s in figures.submissions if s.outcome == "acked"]
    lost = next((r.violations for r in results if r.name == "no_acknowledged_submission_lost"), 0)
    unexpected = next((r.violations for r in results if r.name == "no_unexpected_job"), 0)
    executed = db.get("executed_jobs") or 0
    redelivery = db.get("redelivered", 0) / executed if executed else 0.0
    retried = sum(s.tries for s in figures.submissions) - len(figures.submissions)
    actions = Counter({f"{action}:{status}": n for (action, status), n in figures.api_actions.items()})
    if figures.seconds_to_terminal is not None:
        settle = f"{figures.seconds_to_terminal:.1f} s"
    else:
        # A backlog still draining, or a stranded job (every_job_ends_as_expected tells which).
        settle = (
            f"not within the settle timeout of {figures.settle_timeout:g} s"
            f" ({figures.unsettled_at_timeout} jobs still queued or running then)"
        )
    lines = [
        "== Chaos run",
        f"seed {figures.seed}, {figures.jobs_planned} jobs planned, {figures.stores}",
        "faults applied per kind (planned / applied / skipped):",
        *(
            f"  {kind:<22} {planned:>3} / {figures.faults_applied[kind]:>3}"
            f" / {figures.faults_skipped[kind]:>3}"
            for kind, planned in sorted(figures.faults_planned.items())
        ),
        f"  relay kills by the after-push failpoint: {figures.failpoint_kills}",
        f"  worker process kills by the after-pop failpoint: {figures.pop_failpoint_kills}",
        f"  unexpected process exits: {len(figures.unexpected_exits)} {figures.unexpected_exits[:5] or ''}",
        f"submitted: {len(figures.submissions)} ({_counter(channels)})",
        f"  acknowledged {len(acked)}, outcome unknown {outcomes['unknown']},"
        f" rejected {outcomes['rejected']}, unanswered {outcomes['pending']};"
        f" tries beyond the first {retried}",
        f"  lost {lost}, unexpected {unexpected}, jobs in the database {db.get('jobs')}",
        f"  API errors retried: {_counter(figures.api_retried_errors)}",
        f"  API cancel/retry answers: {_counter(actions)}",
        f"terminal states: {_counter(Counter(db.get('statuses', {})))}",
        f"executions: {db.get('executions')} of {executed} jobs;"
        f" per job {_counter(Counter(db.get('executions_per_job', {})))}",
        f"  redelivered {db.get('redelivered')} (rate {redelivery:.1%} of executed jobs; retries after the"
        f" handler's own failures not counted); killed mid-handler {db.get('killed_mid_handler')}",
        f"fenced completions rejected: {db.get('completion_fenced')},"
        f" fenced failures {db.get('failure_fenced')}",
        f"overlapping executions: {db.get('overlapping_pairs')} (a figure: the earlier one started in time"
        f" and was fenced); started after a cancel (the cancel-after-claim race): {db.get('cancel_races')}",
        f"lease expiries rescued {db.get('lease_expired')}, settled by a restarted worker"
        f" {db.get('recovered_on_restart')}, handed back {db.get('handed_back')}",
        f"poison jobs (way:status): {db.get('poison')}",
        f"workflow steps and callbacks: {db.get('workflow_steps')}; released {db.get('released')},"
        f" cancelled by a dependency {db.get('dependency_failed')}",
        "faults while a workflow step was unsettled / while a released step awaited its claim: "
        + (
            ", ".join(
                f"{kind}={in_flight}/{released}"
                for kind, (in_flight, released) in db.get("faults_in_workflows", {}).items()
            )
            or "none"
        ),
        f"job controls: unique jobs {db.get('unique_jobs')}, keyed jobs {db.get('keyed_jobs')},"
        f" snoozes {db.get('snoozed')}, expired {db.get('expired')}",
        f"final reconcile: {figures.reconcile_summary}",
        f"time from the last fault to all jobs terminal: {settle}; whole run {figures.total_seconds:.0f} s",
        "",
        "== Invariants (checked / violations)",
    ]
    width = max((len(r.name) for r in results), default=0)
    for result in results:
        mark = "ok  " if result.passed else "FAIL"
        checked = "-" if result.checked is None else str(result.checked)
        lines.append(
            f"{mark} {result.name:<{width}} {checked:>6} / {result.violations:<4} {result.description}"
        )
        if not result.passed:
            lines.append(f"       e.g. {result.examples}")
    failed = sum(not r.passed for r in results)
    lines.append("")
    lines.append("all invariants hold" if not failed else f"{failed} invariant(s) FAILED")
    return "\n".join(lines)
