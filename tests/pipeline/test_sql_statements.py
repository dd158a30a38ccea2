"""The named SQL statements as the hot path sends them: parsed by psycopg once per process."""

import psycopg._queries
import pytest

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
    # Longer statements are converted (split into parts, placeholders rewritten) on every
    # execute; the claim with its comments was.
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
