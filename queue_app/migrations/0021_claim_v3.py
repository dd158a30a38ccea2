"""The claim, version 3, from its file; a queue's concurrency limit counts its cancelling jobs.

A job being cancelled runs until its worker confirms the stop, so it holds its
queue's slot like a processing one: queue_claim_controlled_jobs_v3 counts both
(queue_app/engine/sql/schema/claim_v3.sql, where the whole claim is written).
The partial index behind that count now covers both statuses, under a name that
says so; it is built before the old one goes, concurrently, so writes to the job
table go on meanwhile.

The version 2 functions (queue_claim_jobs, queue_claim_controlled_jobs) stay:
workers of the previous release call them until they are restarted.
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models

from queue_app.engine.sql.schema import RunSQLFile

ARGUMENTS = "uuid[], text, float8, text[], boolean[], integer, text[], text, text, text"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("queue_app", "0020_maintenance_lease"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(status__in=["processing", "cancelling"]),
                fields=["queue"],
                name="idx_jobs_running_queue",
            ),
        ),
        RunSQLFile(
            "claim_v3.sql",
            sha256="744ea62c6b8982669aa85cfc3cc10f12cb6d212f56564bbcba586719a086facd",
            reverse_sql=(
                f"DROP FUNCTION queue_claim_jobs_v3({ARGUMENTS});"
                f" DROP FUNCTION queue_claim_controlled_jobs_v3({ARGUMENTS})"
            ),
        ),
        RemoveIndexConcurrently(model_name="job", name="idx_jobs_processing_queue"),
    ]
