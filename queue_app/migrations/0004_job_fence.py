"""The fencing token moves from ``attempts`` (which a hand-back lowers) to its own counter."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("queue_app", "0003_schedule_state"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="fence",
            field=models.PositiveBigIntegerField(db_default=0, default=0),
        ),
        # Until now attempts was the token: start every existing job's fence there, so a
        # job running during the upgrade keeps its token and later claims go above it.
        migrations.RunSQL("UPDATE jobs SET fence = attempts", migrations.RunSQL.noop),
    ]
