"""last_error keeps 'ExceptionType: message'; the traceback moves to last_error_traceback.

Rows written before this kept the whole traceback in last_error: it moves
over, and last_error keeps its last line (the 'ExceptionType: message' line
of a Python traceback). Only failed attempts' rows match.
"""

from django.db import migrations, models

SPLIT_OLD_TRACEBACKS = r"""
UPDATE jobs
   SET last_error_traceback = last_error,
       last_error = regexp_replace(rtrim(last_error, E'\n'), '^.*\n', '')
 WHERE last_error LIKE 'Traceback (most recent call last):%'
"""


class Migration(migrations.Migration):
    dependencies = [
        ("queue_app", "0004_job_fence"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="last_error_traceback",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.RunSQL(SPLIT_OLD_TRACEBACKS, reverse_sql=migrations.RunSQL.noop),
    ]
