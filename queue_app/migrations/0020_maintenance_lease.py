"""One row per queue: which process does its maintenance, until when (runtime/maintenance.py)."""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("queue_app", "0019_cancelling"),
    ]

    operations = [
        migrations.CreateModel(
            name="MaintenanceLease",
            fields=[
                ("queue", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("holder", models.CharField(blank=True, default="", max_length=200)),
                ("expires_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("acquired_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                "db_table": "job_maintenance_leases",
                "ordering": ["queue"],
            },
        ),
    ]
