"""Indexes for the periodic queries that read a growing job table a batch at a time.

The reconciler pages through queued jobs by id: with only the status index, each
page read every queued job and sorted them (a million queued jobs: a million rows
per page of 5,000). Retention deletes a status's jobs finished before a cutoff: it
walked the table (or every job of that status) to find each batch. Each now reads
an index range of its own rows. Partial, so a job pays for the first only while
queued and for the second only once finished. Built concurrently: writes to the
job table go on while they are built.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("queue_app", "0016_schedule_definition"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(status="queued"),
                fields=["id"],
                name="idx_jobs_queued_id",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(completed_at__isnull=False),
                fields=["status", "completed_at"],
                name="idx_jobs_finished_at",
            ),
        ),
    ]
