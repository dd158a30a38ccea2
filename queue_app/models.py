"""PostgreSQL is the record: jobs, their log trail, and the outbox of Redis intents."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Now

from queue_app.states import Priority, Status


def task_path_expression() -> KeyTextTransform:
    """``payload->>'task'``: the import path of a django.tasks job's task."""
    return KeyTextTransform("task", "payload")


class Job(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    type = models.CharField(max_length=200)
    queue = models.CharField(max_length=100, default="default")
    payload = models.JSONField(default=dict, blank=True)
    priority = models.CharField(max_length=10, choices=Priority.choices, default=Priority.MEDIUM)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField()
    # When a queued job may next run (retry backoff or scheduled start); NULL = now.
    next_retry_at = models.DateTimeField(null=True, blank=True)
    # When the job last became (or becomes) ready: orders it inside its tier.
    enqueued_at = models.DateTimeField(db_default=Now())
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    # Import path of the exception class behind last_error ("" when no exception raised it).
    last_error_class = models.CharField(max_length=300, blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    # Hash of the request that first used the key: same key + other body = conflict.
    idempotency_fingerprint = models.CharField(max_length=64, blank=True, default="")
    # Ownership filters ride on other indexes; the job table keeps exactly the
    # original system's index set (see Meta), so no FK index here.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="jobs",
        db_index=False,
    )
    # Lease of a running job: which worker holds it and until when.
    worker_id = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # The django.tasks backend alias that enqueued the job ("" for other jobs): one
    # alias never reads another's results.
    backend = models.CharField(max_length=100, blank=True, default="")
    # The trace context current at enqueue (W3C traceparent), when tracing is on: the
    # run's span links to it (queue_app/observability/tracing.py).
    trace_context = models.JSONField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "jobs"
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status"], name="idx_jobs_status"),
            models.Index(fields=["type"], name="idx_jobs_type"),
            models.Index(fields=["created_at"], name="idx_jobs_created_at"),
            models.Index(
                fields=["next_retry_at"],
                name="idx_jobs_next_retry_at",
                condition=models.Q(next_retry_at__isnull=False),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["idempotency_key"],
                name="uq_jobs_idempotency_key",
                condition=models.Q(idempotency_key__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"


class JobLog(models.Model):
    """One row per transition or decision, written in the transition's transaction."""

    class Level(models.TextChoices):
        DEBUG = "debug"
        INFO = "info"
        WARNING = "warning"
        ERROR = "error"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="logs")
    created_at = models.DateTimeField(db_default=Now())
    level = models.CharField(max_length=10, choices=Level.choices, default=Level.INFO)
    event = models.CharField(max_length=50)
    message = models.TextField(blank=True, default="")
    extra = models.JSONField(default=dict, blank=True)

    class Meta:
        db_table = "job_logs"
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.event}: {self.message}"


class OutboxMessage(models.Model):
    """An intent to change Redis, committed with the job change it follows."""

    class Action(models.TextChoices):
        ENQUEUE = "enqueue"  # add to the ready structure (score = priority score)
        SCHEDULE = "schedule"  # add to the retry set (score = due epoch seconds)
        REMOVE = "remove"  # take out of every structure of the queue

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="outbox_messages")
    action = models.CharField(max_length=10, choices=Action.choices)
    queue = models.CharField(max_length=100)
    score = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    dispatched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "job_outbox"
        ordering = ["id"]
        indexes = [
            # The relay's hot query: pending rows in id order.
            models.Index(
                fields=["id"],
                name="idx_outbox_undispatched",
                condition=models.Q(dispatched_at__isnull=True),
            ),
            # The pruner: dispatched rows older than the retention.
            models.Index(
                fields=["dispatched_at"],
                name="idx_outbox_dispatched_at",
                condition=models.Q(dispatched_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.job_id}"


class ScheduleState(models.Model):
    """What the schedulers share about one periodic schedule (declared in code or settings).

    ``last_tick_at`` is the tick last handled (enqueued, or passed over while
    paused); moving it forward with a conditional UPDATE is how exactly one
    scheduler wins each tick.
    """

    name = models.CharField(max_length=100, primary_key=True)
    paused = models.BooleanField(default=False)
    last_tick_at = models.DateTimeField(null=True, blank=True)
    next_tick_at = models.DateTimeField(null=True, blank=True)
    last_job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "job_schedules"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
