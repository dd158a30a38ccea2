"""The named SQL statements as the hot path sends them: parsed by psycopg once per process."""

import psycopg._queries
import pytest
from django.db import connection

from queue_app.engine import execution, sql
from queue_app.services import enqueue_job

# Statements run for every job or every claim.
HOT_PATH = ("insert_job", "claim_jobs", "complete_jobs", "extend_leases")


def test_statements_are_loaded_without_their_comment_lines():
    for name in sql.names():
        lines = sql.query(name).splitlines()
        assert lines, name
        assert not [line for line in lines if line.lstrip().startswith("--")], name


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
def test_the_claim_function_runs_its_statements_on_generic_plans():
    # PostgreSQL re-plans a statement on every run while a plan for the given values looks
    # cheaper than its generic plan; for the claim it always did, and planning its CTE took
    # longer than running it. The function's own setting keeps the plan it made once.
    with connection.cursor() as cursor:
        cursor.execute("SELECT proconfig, provolatile FROM pg_proc WHERE proname = 'queue_claim_jobs'")
        [(config, volatility)] = cursor.fetchall()
    assert config == ["plan_cache_mode=force_generic_plan"]
    # VOLATILE: each statement inside takes a fresh snapshot, so the claim sees what
    # committed while it waited for its queue locks (test_queue_controls_claim.py).
    assert volatility == "v"
