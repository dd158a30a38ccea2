"""The claim function looks its ids up by primary key however small the jobs table is.

Its statements run on generic plans, made once per connection. For the ids of a
claim the planner assumes an array of ten, and on a table of up to about two
thousand jobs it found a sequential scan as cheap as the primary key: a worker
whose first claim came while the table was that small then scanned every job on
each claim (half a millisecond at two thousand jobs) until the statistics
changed. Sequential scans off for the function's statements leave the primary
key (and the job_queues index) as the only sensible plans, whatever the size.
"""

from django.db import migrations

SIGNATURE = "queue_claim_jobs(uuid[], text, float8, text[], boolean[], integer, text[], text, text, text)"


class Migration(migrations.Migration):
    dependencies = [
        ("queue_app", "0012_job_id_time_ordered"),
    ]

    operations = [
        migrations.RunSQL(
            f"ALTER FUNCTION {SIGNATURE} SET enable_seqscan = off",
            f"ALTER FUNCTION {SIGNATURE} RESET enable_seqscan",
        ),
    ]
