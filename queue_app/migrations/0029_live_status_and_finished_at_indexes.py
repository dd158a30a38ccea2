"""Indexes the claim and the completion write stay as shallow as the live jobs.

A claim or a completion changes a job's status, so PostgreSQL writes a new entry into
every index of ``jobs``. The whole-table ``idx_jobs_status`` and ``idx_jobs_finished_at``
(status, completed_at) grew with the history: over 5,000,000 finished jobs each entry
went down 2 and 3 levels more than over an empty table, and a one-process drain ran at
0.79-0.83x (``./dev bench --history``). Their replacements: the live jobs' statuses
(a finished job leaves the index), and one completed_at index per finished status,
where each completion's entry is the newest and lands on the last page. Built
concurrently before the old ones go, so counts and retention stay index reads and
writes go on throughout.
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("queue_app", "0028_job_id_tail_index_by_time")]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(status__in=["cancelling", "processing", "queued", "waiting"]),
                fields=["status"],
                name="idx_jobs_live_status",
            ),
        ),
        *(
            AddIndexConcurrently(
                model_name="job",
                index=models.Index(
                    condition=models.Q(status=status), fields=["completed_at"], name=f"idx_jobs_{status}_at"
                ),
            )
            for status in ("cancelled", "completed", "expired", "failed")
        ),
        RemoveIndexConcurrently(model_name="job", name="idx_jobs_status"),
        RemoveIndexConcurrently(model_name="job", name="idx_jobs_finished_at"),
    ]
