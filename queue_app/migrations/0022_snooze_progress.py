"""Snoozes and progress: a job's snooze count, and the latest progress its attempt reported.

The new columns are nullable or have a constant default, so adding them rewrites
no row. The check that progress is a fraction is added NOT VALID (a brief lock, no
scan) and validated in its own transaction, which lets writes to the job table
go on while it reads the table (every existing row has no progress yet).
"""

from django.contrib.postgres.operations import AddConstraintNotValid, ValidateConstraint
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("queue_app", "0021_claim_v3"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="snoozes",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="job",
            name="progress",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="progress_message",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
        migrations.AddField(
            model_name="job",
            name="progress_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        AddConstraintNotValid(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(progress__isnull=True) | models.Q(progress__gte=0, progress__lte=1),
                name="ck_jobs_progress_fraction",
            ),
        ),
        ValidateConstraint(model_name="job", name="ck_jobs_progress_fraction"),
    ]
