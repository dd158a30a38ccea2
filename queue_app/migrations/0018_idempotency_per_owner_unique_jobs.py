"""Idempotency keys per owner; unique keys.

An idempotency key was unique across all jobs, so one user could learn of
(and block) another's key. Keys are now unique per owner, as the IETF draft
"The Idempotency-Key HTTP Header Field" scopes them per client; jobs without
an owner (enqueued from code) share one scope (NULLS NOT DISTINCT).

The new index is built before the old one is dropped, both concurrently, so
writes to the job table go on meanwhile. Code of the previous release names
the old index in its ON CONFLICT clause: stop it (or accept its enqueues with
a key failing) between this migration and the new code's start. Going back
fails if two owners have used one key since.

Unique jobs: a nullable ``unique_key`` (adding it rewrites nothing) and a
partial index, built concurrently, for the enqueue's look-up of a key's job.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

CREATE_OWNER_KEY_INDEX = (
    "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS uq_jobs_owner_idempotency_key"
    " ON jobs (idempotency_key, owner_id) NULLS NOT DISTINCT WHERE idempotency_key IS NOT NULL"
)
CREATE_GLOBAL_KEY_INDEX = (
    "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS uq_jobs_idempotency_key"
    " ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL"
)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("queue_app", "0017_periodic_query_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    CREATE_OWNER_KEY_INDEX,
                    reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS uq_jobs_owner_idempotency_key",
                ),
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS uq_jobs_idempotency_key",
                    reverse_sql=CREATE_GLOBAL_KEY_INDEX,
                ),
            ],
            state_operations=[
                migrations.RemoveConstraint(model_name="job", name="uq_jobs_idempotency_key"),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(idempotency_key__isnull=False),
                        fields=("idempotency_key", "owner"),
                        name="uq_jobs_owner_idempotency_key",
                        nulls_distinct=False,
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="job",
            name="unique_key",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(unique_key__isnull=False),
                fields=["unique_key", "status", "created_at"],
                name="idx_jobs_unique_key",
            ),
        ),
    ]
