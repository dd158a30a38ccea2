"""The index of each id's last 8 digits, led by the id's time span (its first 6 digits).

On the tail alone (0027) every new job's entry went to a random page of an index
over the whole history: over 5,000,000 jobs the first write to each such page after
a checkpoint logged all of it, 4 KB of WAL a job more than over an empty table, and
bulk enqueue ran at 0.80x (``./dev bench --history``). Led by the span, a new entry
lands among the span's other new entries. The search probes each span of the
history (admin/search.py). Built concurrently before the old index goes, so the
search stays an index probe and writes go on throughout.
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models
from django.db.models.functions import Cast, Left, Right


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("queue_app", "0027_job_id_tail_index")]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                Left(Cast("id", models.TextField()), 6),
                Right(Cast("id", models.TextField()), 8),
                name="idx_jobs_time_id_tail",
            ),
        ),
        RemoveIndexConcurrently(model_name="job", name="idx_jobs_id_tail"),
    ]
