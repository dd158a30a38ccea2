"""The named SQL statements as the hot path sends them: parsed by psycopg once per process."""

import psycopg._queries
import pytest
from django.db import connection

from queue_app.engine import execution, sql
from queue_app.services import enqueue_job

# Statements run for every job or every claim.
HOT_PATH = ("insert_job", "lock_queues_for_claim", "claim_jobs", "complete_jobs", "extend_leases")


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


# pg_prepared_statements holds the text as sent ($1 for %(ids)s): matched by its start.
PLANS = "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE starts_with(statement, %s)"


def _claim_plans() -> tuple[int, int]:
    """(generic, custom) plans of the claim statement on this session so far."""
    with connection.cursor() as cursor:
        cursor.execute(PLANS, [sql.query("claim_jobs").partition("%")[0]])
        rows = cursor.fetchall()
    return rows[0] if rows else (0, 0)


@pytest.mark.django_db(transaction=True)
def test_the_claim_statement_is_planned_once_per_connection_not_on_every_claim():
    # PostgreSQL re-plans a prepared statement on every run while a plan for the given
    # values looks cheaper than its generic plan; for the claim it always did.
    jobs = [enqueue_job("demo.echo", {"n": n}) for n in range(8)]
    # This session's statements are prepared anew (psycopg forgets its own on seeing
    # this), so the first runs are the ones PostgreSQL plans for the values it is given.
    connection.connection.execute("DEALLOCATE ALL")
    generic_before, custom_before = _claim_plans()
    for job in jobs:
        claimed = execution.claim([str(job.id)], worker_id="w-plan", queues={"default": False})
        assert [item.id for item in claimed.jobs] == [str(job.id)]
    generic, custom = _claim_plans()
    assert (generic - generic_before, custom - custom_before) == (len(jobs), 0)
