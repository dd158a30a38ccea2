"""Priorities become integers (-100..100) on the job; outbox rows carry the ready set's member."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("queue_app", "0006_queue_state"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="priority_value",
            field=models.SmallIntegerField(db_default=0, default=0),
        ),
        # Existing jobs keep their tier's place: high = 10, medium = 0, low = -10.
        migrations.RunSQL(
            "UPDATE jobs SET priority_value = CASE priority WHEN 'high' THEN 10 WHEN 'low' THEN -10 ELSE 0 END",
            migrations.RunSQL.noop,
        ),
        migrations.AddField(
            model_name="outboxmessage",
            name="member",
            field=models.CharField(blank=True, db_default="", default="", max_length=60),
        ),
    ]
