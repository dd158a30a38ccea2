"""What placed a schedule's ticks (its cron or interval, and time zone), kept on its state row.

A schedule whose definition changed, or a row from before this column, is told
apart from one whose ticks were only missed. A database default: a scheduler
still running the previous release inserts rows without the column.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("queue_app", "0015_job_owner_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedulestate",
            name="definition",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
    ]
