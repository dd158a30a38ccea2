"""The migrations yield exactly the original system's index set on the job table, plus the
indexes queries of ours need (the claim's count of a limited queue's processing jobs, a
user's own jobs, newest first, for the API's list, the reconciler's pages of queued jobs,
and retention's oldest finished jobs of a status)."""

import pytest
from django.db import connection


def _indexes(table: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return dict(cursor.fetchall())


@pytest.mark.django_db
def test_job_table_has_exactly_the_original_indexes():
    indexes = _indexes("jobs")
    assert set(indexes) == {
        "jobs_pkey",
        "idx_jobs_status",
        "idx_jobs_type",
        "idx_jobs_created_at",
        "idx_jobs_next_retry_at",
        "uq_jobs_idempotency_key",
        "idx_jobs_processing_queue",
        "idx_jobs_owner_created",
        "idx_jobs_queued_id",
        "idx_jobs_finished_at",
    }
    assert indexes["idx_jobs_processing_queue"].endswith(
        "USING btree (queue) WHERE ((status)::text = 'processing'::text)"
    )
    assert indexes["idx_jobs_owner_created"].endswith(
        "USING btree (owner_id, created_at, id) WHERE (owner_id IS NOT NULL)"
    )
    assert indexes["idx_jobs_queued_id"].endswith("USING btree (id) WHERE ((status)::text = 'queued'::text)")
    assert indexes["idx_jobs_finished_at"].endswith(
        "USING btree (status, completed_at) WHERE (completed_at IS NOT NULL)"
    )
    assert "UNIQUE" in indexes["jobs_pkey"]
    assert indexes["idx_jobs_status"].endswith("USING btree (status)")
    assert indexes["idx_jobs_type"].endswith("USING btree (type)")
    assert indexes["idx_jobs_created_at"].endswith("USING btree (created_at)")
    assert indexes["idx_jobs_next_retry_at"].endswith(
        "USING btree (next_retry_at) WHERE (next_retry_at IS NOT NULL)"
    )
    assert indexes["uq_jobs_idempotency_key"].startswith("CREATE UNIQUE INDEX")
    assert indexes["uq_jobs_idempotency_key"].endswith(
        "USING btree (idempotency_key) WHERE (idempotency_key IS NOT NULL)"
    )
    non_unique = [name for name in indexes if name not in ("jobs_pkey", "uq_jobs_idempotency_key")]
    assert all("UNIQUE" not in indexes[name] for name in non_unique)


@pytest.mark.django_db
def test_outbox_has_a_partial_index_on_undispatched_rows():
    indexes = _indexes("job_outbox")
    assert indexes["idx_outbox_undispatched"].endswith("USING btree (id) WHERE (dispatched_at IS NULL)")
