"""The named SQL statements as the hot path sends them: parsed by psycopg once per process."""

import ast
import json
import re

import psycopg._queries
import pytest
from django.db import connection

from queue_app.engine import execution, sql
from queue_app.engine.execution import Completion
from queue_app.engine.transitions import table_params
from queue_app.models import Job
from queue_app.services import JobRequest, enqueue_job, enqueue_jobs
from tests.helpers import PROJECT_ROOT

# Statements run for every job or every claim.
HOT_PATH = ("insert_job", "claim_jobs", "complete_jobs", "extend_leases")
STATEMENT_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.M)


def statement_names() -> list[str]:
    """The ``-- name:`` of every statement in queue_app/engine/sql/*.sql, read from the files."""
    files = sorted((PROJECT_ROOT / "queue_app" / "engine" / "sql").glob("*.sql"))
    return [name for path in files for name in STATEMENT_NAME.findall(path.read_text())]


def test_statements_are_loaded_without_their_comment_lines():
    names = statement_names()
    assert set(HOT_PATH) <= set(names)
    for name in names:
        lines = sql.query(name).splitlines()
        assert lines, name
        assert not [line for line in lines if line.lstrip().startswith("--")], name


def _is_text(node: ast.expr) -> bool:
    """Statement text written in place: a string, an f-string, or one formatted or joined."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _is_text(node.left) or _is_text(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "format" and _is_text(node.func.value)
    return False


def test_the_app_sends_no_statement_text_of_its_own_outside_engine_sql():
    """Every statement the app sends is a named one of queue_app/engine/sql/*.sql, with bound
    values: an ``execute`` of text written (or formatted) in place anywhere else fails here.
    Migrations keep the SQL they were written with."""
    app = PROJECT_ROOT / "queue_app"
    found = []
    for path in sorted(app.rglob("*.py")):
        relative = path.relative_to(app)
        if relative.parts[0] == "migrations" or relative.parts[:2] == ("engine", "sql"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("execute", "executemany")
                and node.args
                and _is_text(node.args[0])
            ):
                found.append(f"{relative}:{node.lineno}")
    assert found == []


@pytest.mark.parametrize("name", HOT_PATH)
def test_hot_path_statements_fit_psycopgs_conversion_cache(name):
    # psycopg converts a longer statement (splits it, rewrites its placeholders) again on
    # every execute, as it did the claim while its comments made it 4.6 KB.
    assert len(sql.query(name).encode()) <= psycopg._queries.MAX_CACHED_STATEMENT_LENGTH


@pytest.mark.django_db(transaction=True)
def test_a_repeated_claim_reuses_psycopgs_converted_statements():
    first, second = enqueue_job("demo.echo", {"n": 1}), enqueue_job("demo.echo", {"n": 2})
    execution.claim([str(first.id)], worker_id="w-sql", queues={"default": False})
    uncached = psycopg._queries._query2pg_nocache
    calls = []
    psycopg._queries._query2pg_nocache = lambda *args: calls.append(args) or uncached(*args)
    try:
        claimed = execution.claim([str(second.id)], worker_id="w-sql", queues={"default": False})
    finally:
        psycopg._queries._query2pg_nocache = uncached
    assert [job.id for job in claimed.jobs] == [str(second.id)]
    assert calls == []


@pytest.mark.django_db
def test_the_claim_function_runs_its_statements_on_generic_plans_without_jit():
    # PostgreSQL re-plans a statement on every run while a plan for the given values looks
    # cheaper than its generic plan; for the claim it always did, and planning its CTE took
    # longer than running it. The function's own setting keeps the plan it made once.
    # JIT compiled the claim on every call once its estimated cost passed jit_above_cost.
    # Both: the claim's short path, and the claim with queue controls it falls back to.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT proname, proconfig, provolatile FROM pg_proc"
            " WHERE proname IN ('queue_claim_jobs_v5', 'queue_claim_controlled_jobs_v5') ORDER BY proname"
        )
        functions = cursor.fetchall()
    assert [name for name, _, _ in functions] == ["queue_claim_controlled_jobs_v5", "queue_claim_jobs_v5"]
    for _, config, volatility in functions:
        assert sorted(config) == ["enable_seqscan=off", "jit=off", "plan_cache_mode=force_generic_plan"]
        # VOLATILE: each statement inside takes a fresh snapshot, so the claim sees what
        # committed while it waited for its queue locks (test_queue_controls_claim.py).
        assert volatility == "v"


def _controlled_claims() -> int:
    """Calls of the claim with queue controls in this transaction (PostgreSQL's own count)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
            " WHERE funcname = 'queue_claim_controlled_jobs_v5'"
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_a_claim_of_jobs_whose_queue_has_no_controls_takes_the_short_path():
    """schema/claim_v4.sql: only a claim that left an id unclaimed runs the full claim."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL track_functions = 'pl'")
    first, second = enqueue_job("demo.echo", {"n": 1}), enqueue_job("demo.echo", {"n": 2})
    claimed = execution.claim([str(first.id), str(second.id)], worker_id="w-sql", queues={"default": False})
    assert [job.id for job in claimed.jobs] == [str(first.id), str(second.id)]
    assert _controlled_claims() == 0
    # Claimed already: the short path claims nothing, and the full claim skips it.
    again = execution.claim([str(first.id)], worker_id="w-other", queues={"default": False})
    assert again.jobs == [] and again.held_back == {}
    assert _controlled_claims() == 1
    assert Job.objects.get(id=first.id).worker_id == "w-sql"


def _plan(name: str, params: dict) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql.query(name), params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.django_db
def test_running_jobs_are_completed_and_extended_by_primary_key():
    """With many jobs running and no statistics yet, a plan that hashes every processing job
    to complete or extend a few costs milliseconds per call; the statements leave the
    planner only the primary key."""
    jobs = enqueue_jobs([JobRequest(type="demo.echo", payload={"n": n}) for n in range(3000)])
    with connection.cursor() as cursor:
        cursor.execute("UPDATE queue_app_jobs SET status = 'processing', fence = 1, worker_id = 'w-plan'")
    rows = json.dumps([{"id": str(job.id), "fence": 1, "result": None} for job in jobs[:20]])
    unanalysed = _completion_plans(rows)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE queue_app_jobs")  # as an autovacuum may have done by now in a long run
    for name, plan in [*unanalysed.items(), *_completion_plans(rows).items()]:
        # "Bitmap Index Scan on queue_app_jobs_pkey" without statistics, "Index Scan using" it with.
        assert "queue_app_jobs_pkey" in plan, (name, plan)
        assert "Seq Scan on queue_app_jobs" not in plan, (name, plan)
        assert "idx_jobs_running_queue" not in plan and "idx_jobs_live_status" not in plan, (name, plan)


def _completion_plans(rows: str) -> dict[str, str]:
    return {
        "complete_jobs": _plan("complete_jobs", {"rows": rows, **table_params("complete")}),
        "extend_leases": _plan(
            "extend_leases",
            {"rows": rows, "lease": 60, "running": ["cancelling", "processing"], "worker": "w-plan"},
        ),
    }


def _seq_scans_of_jobs() -> int:
    """Sequential scans of the jobs table so far, this connection's own included."""
    with connection.cursor() as cursor:
        # This backend's counts reach the shared statistics when it next goes idle.
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'queue_app_jobs'::regclass")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("count", [300, 1500])
def test_claims_completions_and_heartbeats_never_scan_a_small_jobs_table(count):
    """On a table of up to a few thousand jobs the planner took a scan of every job for as
    cheap as a few primary-key look-ups (it is several times slower): the claim's generic
    plan, made once per connection, then scanned the table on every claim. Counted by
    PostgreSQL itself, as the worker sends them: claim, claim with completions, heartbeat,
    completion alone."""
    jobs = enqueue_jobs([JobRequest(type="demo.echo", payload={"n": n}) for n in range(count)])
    first, second = (str(job.id) for job in jobs[:2])
    with connection.cursor() as cursor:
        cursor.execute("DISCARD PLANS")  # plans this connection made for other tables
    before = _seq_scans_of_jobs()

    [claimed] = execution.claim([first], worker_id="w-plan", queues={"default": False}).jobs
    [next_claimed] = execution.claim(
        [second],
        worker_id="w-plan",
        queues={"default": False},
        completions=[Completion(claimed.id, claimed.fence, None)],
    ).jobs
    assert set(execution.extend_leases([(next_claimed.id, next_claimed.fence)], worker_id="w-plan")) == {
        second
    }
    assert execution.complete_jobs([Completion(next_claimed.id, next_claimed.fence, None)]) == {second}

    assert _seq_scans_of_jobs() == before
    assert Job.objects.filter(id__in=[first, second], status="completed").count() == 2
