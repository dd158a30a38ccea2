"""Job expiry and per-key limits, and the claim, version 4, that enforces both.

A job may carry ``expires_at`` (not started by then, it never runs: settled as
``expired``) and a ``concurrency_key``; a queue may limit each key's running
jobs and starts per second (``key_concurrency_limit``, ``key_rate_limit``, the
rate spent from a bucket per key in ``job_key_buckets``). The claim,
queue_claim_jobs_v4 (queue_app/engine/sql/schema/claim_v4.sql), checks both;
the version 3 functions stay for the workers of the previous release.

The two indexes are partial, so jobs without a key or an expiry pay nothing for
them; they are built concurrently, so writes to the job table go on meanwhile.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

from queue_app.engine.sql.schema import RunSQLFile

ARGUMENTS = "uuid[], text, float8, text[], boolean[], integer, text[], text, text, text, text, text, text"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("queue_app", "0023_workflows"),
    ]

    operations = [
        migrations.CreateModel(
            name="KeyBucket",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "queue", "key", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("queue", models.CharField(max_length=100)),
                ("key", models.CharField(max_length=255)),
                ("tokens", models.FloatField()),
                ("updated_at", models.DateTimeField()),
            ],
            options={"db_table": "job_key_buckets"},
        ),
        migrations.AddField(
            model_name="job",
            name="concurrency_key",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="parked",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddField(
            model_name="job",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="queuestate",
            name="key_concurrency_limit",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="queuestate",
            name="key_rate_limit",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("processing", "Processing"),
                    ("cancelling", "Cancelling"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                    ("expired", "Expired"),
                ],
                default="queued",
                max_length=20,
            ),
        ),
        migrations.AddConstraint(
            model_name="queuestate",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("key_concurrency_limit__isnull", True),
                    ("key_concurrency_limit__gte", 1),
                    _connector="OR",
                ),
                name="ck_job_queues_key_concurrency_limit",
            ),
        ),
        migrations.AddConstraint(
            model_name="queuestate",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("key_rate_limit__isnull", True), ("key_rate_limit__gt", 0), _connector="OR"
                ),
                name="ck_job_queues_key_rate_limit",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(
                    ("concurrency_key__isnull", False), ("status__in", ["processing", "cancelling"])
                ),
                fields=["queue", "concurrency_key"],
                name="idx_jobs_running_key",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("parked", True), ("status", "queued")),
                fields=["queue", "concurrency_key", "-priority_value", "enqueued_at"],
                name="idx_jobs_parked_key",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("concurrency_key__isnull", False), ("parked", False), ("status", "queued")),
                fields=["queue", "concurrency_key"],
                name="idx_jobs_queued_key",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("expires_at__isnull", False), ("status", "queued")),
                fields=["expires_at"],
                name="idx_jobs_queued_expiry",
            ),
        ),
        RunSQLFile(
            "claim_v4.sql",
            sha256="0b85835a2a4aea717758b1ceb9e7e60878f8d4d15f1688eb34704ab5924406d4",
            reverse_sql=(
                f"DROP FUNCTION queue_claim_jobs_v4({ARGUMENTS});"
                f" DROP FUNCTION queue_claim_controlled_jobs_v4({ARGUMENTS});"
                " DROP FUNCTION queue_release_stalled_keys_v1(text[], integer, integer)"
            ),
        ),
    ]
