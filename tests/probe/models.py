from django.db import models


class Execution(models.Model):
    """One row per handler execution, committed when it starts: duplicates show."""

    job_id = models.UUIDField(db_index=True)
    attempt = models.PositiveIntegerField()
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True)


class Effect(models.Model):
    """Written by an atomic handler in the job's completion transaction."""

    job_id = models.UUIDField(db_index=True)
    attempt = models.PositiveIntegerField()
    # The journaled execution that wrote it (probe.chaos), so a fenced one can be told apart.
    execution = models.CharField(max_length=32, blank=True, default="")
