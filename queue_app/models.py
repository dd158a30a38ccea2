"""PostgreSQL is the record: jobs, their log trail, the outbox of Redis intents, queue controls."""

from django.conf import settings
from django.db import models
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Now

from queue_app.ids import new_job_id
from queue_app.states import Priority, Status


def task_path_expression() -> KeyTextTransform:
    """``payload->>'task'``: the import path of a django.tasks job's task."""
    return KeyTextTransform("task", "payload")


class Job(models.Model):
    id = models.UUIDField(primary_key=True, default=new_job_id, editable=False)
    type = models.CharField(max_length=200)
    queue = models.CharField(max_length=100, default="default")
    payload = models.JSONField(default=dict, blank=True)
    # The named tier (what the REST API, filters and the admin show) ...
    priority = models.CharField(max_length=10, choices=Priority.choices, default=Priority.MEDIUM)
    # ... and the integer the ready set orders by (-100..100, higher first; a tier
    # given by name stands for states.PRIORITY_VALUE).
    priority_value = models.SmallIntegerField(default=0, db_default=0)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)
    # Attempts charged: a hand-back (the job never really ran) takes its claim back.
    attempts = models.PositiveIntegerField(default=0)
    # The fencing token: +1 on every claim and never lowered, so two holders never
    # share a value. Writes on behalf of a running attempt are conditional on it.
    fence = models.PositiveBigIntegerField(default=0, db_default=0)
    max_attempts = models.PositiveIntegerField()
    # Times the job snoozed (its handler raised Snooze): each put it back to wait, its
    # attempt not charged; the snooze UPDATE refuses one past JOBQUEUE['MAX_SNOOZES'].
    snoozes = models.PositiveIntegerField(default=0, db_default=0)
    # When a queued job may next run (retry backoff or scheduled start); NULL = now.
    next_retry_at = models.DateTimeField(null=True, blank=True)
    # When the job last became (or becomes) ready: orders it among equal priorities.
    enqueued_at = models.DateTimeField(db_default=Now())
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # "ExceptionType: message" of the last failed attempt: what the job's owner sees.
    last_error = models.TextField(blank=True, default="")
    # Its traceback (server paths, source lines): for users with queue_app.view_job only.
    last_error_traceback = models.TextField(blank=True, default="")
    # Import path of the exception class behind last_error ("" when no exception raised it).
    last_error_class = models.CharField(max_length=300, blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    # The latest progress a running attempt reported (current_job().progress), 0..1, with
    # its message and time; NULL until one does. Written only while that attempt holds the job.
    progress = models.FloatField(null=True, blank=True)
    progress_message = models.TextField(blank=True, default="", db_default="")
    progress_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    # Hash of the request that first used the key: same key + other body = conflict.
    # Keys are per owner (see Meta.constraints).
    idempotency_fingerprint = models.CharField(max_length=64, blank=True, default="")
    # Unique jobs (queue_app/engine/uniqueness.py): no second job of this owner with this
    # key while this one is in the statuses (and period) the enqueue asked for.
    unique_key = models.CharField(max_length=255, null=True, blank=True)
    # Indexed only where set (see Meta): jobs enqueued from code have no owner.
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
    # A retry asked for while the job was cancelling: applied when the cancel is confirmed.
    retry_requested = models.BooleanField(default=False, db_default=False)
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
            # A claim on a queue with a concurrency limit counts the queue's running jobs:
            # processing, and cancelling until the worker confirms (the claim function in
            # engine/sql/schema/claim_v3.sql names the same two statuses).
            models.Index(
                fields=["queue"],
                name="idx_jobs_running_queue",
                condition=models.Q(status__in=["processing", "cancelling"]),
            ),
            # A unique job's enqueue looks for its key's newest job in some statuses (and
            # the admin's search for a key). Partial: other jobs pay nothing for it.
            models.Index(
                fields=["unique_key", "status", "created_at"],
                name="idx_jobs_unique_key",
                condition=models.Q(unique_key__isnull=False),
            ),
            # A user's own jobs, newest first, a page at a time (the API's list for anyone
            # without queue_app.view_job). Partial: an ownerless job pays nothing for it.
            models.Index(
                fields=["owner", "created_at", "id"],
                name="idx_jobs_owner_created",
                condition=models.Q(owner__isnull=False),
            ),
            # The reconciler's keyset pages over queued jobs, in id order (engine/sql/reconcile.sql):
            # each page reads its own rows, however many jobs are queued or finished.
            models.Index(
                fields=["id"],
                name="idx_jobs_queued_id",
                condition=models.Q(status="queued"),
            ),
            # Retention (engine/retention.py): one status's finished jobs, oldest first, up to a cutoff.
            models.Index(
                fields=["status", "completed_at"],
                name="idx_jobs_finished_at",
                condition=models.Q(completed_at__isnull=False),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(progress__isnull=True) | models.Q(progress__gte=0, progress__lte=1),
                name="ck_jobs_progress_fraction",
            ),
            # A key is its owner's (the IETF Idempotency-Key draft scopes keys per client);
            # jobs without an owner (enqueued from code) share one scope, hence NULLS NOT
            # DISTINCT. The key leads, so the admin's search by key alone uses it too.
            models.UniqueConstraint(
                fields=["idempotency_key", "owner"],
                name="uq_jobs_owner_idempotency_key",
                condition=models.Q(idempotency_key__isnull=False),
                nulls_distinct=False,
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
        ENQUEUE = "enqueue"  # add to the ready structure (score = -priority, member below)
        SCHEDULE = "schedule"  # add to the retry set (score = due epoch seconds)
        REMOVE = "remove"  # take out of the priority and retry sets (a FIFO list keeps it)

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="outbox_messages")
    action = models.CharField(max_length=10, choices=Action.choices)
    queue = models.CharField(max_length=100)
    score = models.FloatField(null=True, blank=True)
    # The job's member in its queue's ready sorted set ("<enqueue µs>:<id>", see
    # broker.scores): enqueue adds it, remove takes it out. "" = the bare id.
    member = models.CharField(max_length=60, blank=True, default="", db_default="")
    created_at = models.DateTimeField(db_default=Now())
    dispatched_at = models.DateTimeField(null=True, blank=True)
    # The relay leaves the row alone until then. Set when the committing process pushes the
    # job to Redis itself (DISPATCH_ON_COMMIT; afterwards the relay re-sends it only if the
    # job is still queued), and to the end of a relay's claim while it pushes the row (if
    # the relay dies before marking it, the row falls due again then).
    dispatch_after = models.DateTimeField(null=True, blank=True)
    # An enqueue onto a strict-FIFO list goes to its head instead of its tail: a job handed
    # back unstarted was ahead of every job enqueued after it and keeps that place.
    to_head = models.BooleanField(default=False, db_default=False)

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
    scheduler wins each tick. ``definition`` is what placed those ticks (see
    ``Schedule.definition``): when the declared one differs, the old ticks say
    nothing about the new ones, and the schedule starts afresh.
    """

    name = models.CharField(max_length=100, primary_key=True)
    paused = models.BooleanField(default=False)
    last_tick_at = models.DateTimeField(null=True, blank=True)
    next_tick_at = models.DateTimeField(null=True, blank=True)
    last_job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    # Empty for a row written before definitions were stored: it takes the declared one.
    definition = models.TextField(blank=True, default="", db_default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "job_schedules"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class QueueState(models.Model):
    """The controls of one queue, shared by every worker: pause, concurrency and rate limits.

    Read by the claim statement itself (engine/sql/execution.sql), so a pause or
    a limit holds across every worker host from the moment it commits. The
    ``rate_tokens``/``rate_updated_at`` pair is the rate limit's token bucket,
    spent by the claims under the queue's advisory lock.
    """

    name = models.CharField(max_length=100, primary_key=True)
    paused = models.BooleanField(default=False)
    # At most this many of the queue's jobs processing at once (claimed and not settled); NULL = no limit.
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    # At most this many claims per second (burst: one second's worth, at least 1); NULL = no limit.
    rate_limit = models.FloatField(null=True, blank=True)
    rate_tokens = models.FloatField(null=True, blank=True, editable=False)
    rate_updated_at = models.DateTimeField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "job_queues"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(concurrency_limit__isnull=True) | models.Q(concurrency_limit__gte=1),
                name="ck_job_queues_concurrency_limit",
            ),
            models.CheckConstraint(
                condition=models.Q(rate_limit__isnull=True) | models.Q(rate_limit__gt=0),
                name="ck_job_queues_rate_limit",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class MaintenanceLease(models.Model):
    """Which process does a queue's maintenance (in-flight sweeps, retry promotion, lease
    rescue), until when.

    A lease, not a lock: the holder renews ``expires_at`` every second or so; once it
    stops (killed, stalled, cut off from PostgreSQL), another candidate takes the row
    with a conditional UPDATE as soon as it has expired. Works through PgBouncer in
    transaction mode, where a session advisory lock would not.
    """

    queue = models.CharField(max_length=100, primary_key=True)
    holder = models.CharField(max_length=200, blank=True, default="")
    expires_at = models.DateTimeField(db_default=Now())
    # When the current holder took the lease (renewals leave it): how long it has led.
    acquired_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "job_maintenance_leases"
        ordering = ["queue"]

    def __str__(self) -> str:
        return f"{self.queue}: {self.holder or 'nobody'}"
