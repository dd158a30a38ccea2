"""PostgreSQL is the record: jobs, their log trail, the outbox of Redis intents, queue controls.

Over 500 lines on purpose: every table of the app in one module, as Django apps keep
them, so one file shows the whole schema (the database functions are in
engine/sql/schema/); most of it is field and index declarations with their reasons.
"""

from django.conf import settings
from django.db import models
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Left, Now, Right

from queue_app.ids import ID_SPAN_DIGITS, ID_TAIL_DIGITS, new_job_id
from queue_app.states import TERMINAL, Priority, Status

# The statuses of the partial indexes' conditions, in a fixed order: a migration compares them.
LIVE_STATUSES = sorted(status.value for status in Status if status not in TERMINAL)
FINISHED_STATUSES = sorted(status.value for status in TERMINAL)


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
    # A job not started by then never runs: the claim (or the maintenance leader, for one
    # no worker pops) settles it as expired. NULL = no expiry.
    expires_at = models.DateTimeField(null=True, blank=True)
    # Jobs sharing a key (e.g. "customer:42") share their queue's per-key limits
    # (QueueState.key_concurrency_limit, key_rate_limit). NULL = no key.
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)
    # A queued job with a key waits out of Redis while another job of its key is ready:
    # each key has one id in line at a time, and the claim that takes it puts the key's
    # next job at the back of the line (round robin among keys, claim_v5.sql).
    parked = models.BooleanField(default=False, db_default=False)
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
        db_table = "queue_app_jobs"
        ordering = ["-created_at"]
        indexes = [
            # Live jobs by status (the stats' counts, the admin's and the API's filters, the
            # leases' rescue). Partial: a finished job leaves it, so the claim and the
            # completion write an index of the live jobs, not one as deep as the history.
            models.Index(
                fields=["status"],
                name="idx_jobs_live_status",
                condition=models.Q(status__in=LIVE_STATUSES),
            ),
            models.Index(fields=["type"], name="idx_jobs_type"),
            models.Index(fields=["created_at"], name="idx_jobs_created_at"),
            models.Index(
                fields=["next_retry_at"],
                name="idx_jobs_next_retry_at",
                condition=models.Q(next_retry_at__isnull=False),
            ),
            # A claim on a queue with a concurrency limit counts the queue's running jobs:
            # processing, and cancelling until the worker confirms (the claim function in
            # engine/sql/schema/claim_v5.sql names the same two statuses).
            models.Index(
                fields=["queue"],
                name="idx_jobs_running_queue",
                condition=models.Q(status__in=["processing", "cancelling"]),
            ),
            # A claim on a queue with per-key limits counts the running jobs of a popped job's
            # key (engine/sql/schema/claim_v5.sql). Partial: jobs without a key pay nothing.
            models.Index(
                fields=["queue", "concurrency_key"],
                name="idx_jobs_running_key",
                condition=models.Q(status__in=["processing", "cancelling"], concurrency_key__isnull=False),
            ),
            # A key's next job, when the claim (or the maintenance leader) gives the key its turn.
            models.Index(
                fields=["queue", "concurrency_key", "-priority_value", "enqueued_at"],
                name="idx_jobs_parked_key",
                condition=models.Q(parked=True, status="queued"),
            ),
            # A keyed job's ready (or waiting) id in line, if any: the enqueue parks the new
            # job behind it, the claim gives the key its next turn only without one.
            models.Index(
                fields=["queue", "concurrency_key"],
                name="idx_jobs_queued_key",
                condition=models.Q(status="queued", concurrency_key__isnull=False, parked=False),
            ),
            # The maintenance leader settles queued jobs past their expiry that no worker popped.
            models.Index(
                fields=["expires_at"],
                name="idx_jobs_queued_expiry",
                condition=models.Q(status="queued", expires_at__isnull=False),
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
            # Retention (engine/retention.py): one status's finished jobs, oldest first, up to a
            # cutoff; the stats count a finished status here. One index per status, so a
            # completion's entry is the newest of its index and lands on its last page, however
            # long the history (led by the status, it went down 4 levels over 5,000,000 jobs).
            *(
                models.Index(
                    fields=["completed_at"],
                    name=f"idx_jobs_{status}_at",
                    condition=models.Q(status=status),
                )
                for status in FINISHED_STATUSES
            ),
            # The admin's search by the id's last digits, the part its lists show
            # (admin/display.short_id): a probe per span of the history (admin/search.py),
            # where matching the ids' text read every job (13 s over 5,000,000 jobs). Led by
            # the id's time span: on the random tail alone, each new job wrote a random page
            # of it, after a checkpoint a whole page to the WAL (4 KB a job at 5,000,000).
            models.Index(
                Left(Cast("id", models.TextField()), ID_SPAN_DIGITS),
                Right(Cast("id", models.TextField()), ID_TAIL_DIGITS),
                name="idx_jobs_time_id_tail",
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
        db_table = "queue_app_job_logs"
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
        db_table = "queue_app_job_outbox"
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
        db_table = "queue_app_job_schedules"
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
    # Per concurrency key (any value of Job.concurrency_key in this queue): at most this many
    # of the key's jobs running at once, and at most this many starts per second (a token
    # bucket per key in queue_app_job_key_buckets, burst max(1, rate)). NULL = no limit.
    key_concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    key_rate_limit = models.FloatField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "queue_app_job_queues"
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
            models.CheckConstraint(
                condition=models.Q(key_concurrency_limit__isnull=True)
                | models.Q(key_concurrency_limit__gte=1),
                name="ck_job_queues_key_concurrency_limit",
            ),
            models.CheckConstraint(
                condition=models.Q(key_rate_limit__isnull=True) | models.Q(key_rate_limit__gt=0),
                name="ck_job_queues_key_rate_limit",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class KeyBucket(models.Model):
    """The rate bucket of one concurrency key in one queue (QueueState.key_rate_limit),
    spent by the claims under the queue's exclusive advisory lock."""

    pk = models.CompositePrimaryKey("queue", "key")
    queue = models.CharField(max_length=100)
    key = models.CharField(max_length=255)
    tokens = models.FloatField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "queue_app_job_key_buckets"

    def __str__(self) -> str:
        return f"{self.queue}: {self.key}"


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
        db_table = "queue_app_job_maintenance_leases"
        ordering = ["queue"]

    def __str__(self) -> str:
        return f"{self.queue}: {self.holder or 'nobody'}"


class Workflow(models.Model):
    """A graph of jobs enqueued in one call (queue_app/engine/workflows.py): its steps are
    ``WorkflowStep`` rows, its edges ``JobDependency`` rows."""

    id = models.UUIDField(primary_key=True, default=new_job_id, editable=False)
    name = models.CharField(max_length=200, blank=True, default="")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="job_workflows",
        db_index=False,
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "queue_app_job_workflows"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name or str(self.id)


class WorkflowStep(models.Model):
    """A job's place in a workflow, under the step name its graph gave it."""

    job = models.OneToOneField(Job, primary_key=True, on_delete=models.CASCADE, related_name="workflow_step")
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="steps")
    name = models.CharField(max_length=200)
    # The step's order in the graph as submitted (the admin draws and lists steps by it).
    position = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "queue_app_job_workflow_steps"
        ordering = ["workflow", "position"]
        constraints = [models.UniqueConstraint(fields=["workflow", "name"], name="uq_workflow_step_name")]

    def __str__(self) -> str:
        return self.name


class JobDependency(models.Model):
    """Job ``job`` waits for job ``depends_on`` to settle (completed, failed or cancelled).

    Rows are written only with their dependent, at its enqueue: an existing job never
    gains a dependency, so no cycle can form outside one enqueue call (which refuses one).
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependencies", db_index=False)
    depends_on = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependents", db_index=False)
    # The parent's place among the job's dependencies (a chord's callback reads the group's
    # results in this order).
    position = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "queue_app_job_dependencies"
        ordering = ["job", "position"]
        constraints = [models.UniqueConstraint(fields=["job", "depends_on"], name="uq_job_dependency")]
        indexes = [
            # Who waits on me: the settle of a job looks its dependents up by it.
            models.Index(fields=["depends_on"], name="idx_job_dependencies_parent"),
        ]


class JobWait(models.Model):
    """What a job with dependencies does when one of them does not complete, and which one
    cancelled it (a retry of that job resumes it)."""

    class OnFailure(models.TextChoices):
        # Cancelled as soon as a dependency ends failed or cancelled (the default).
        CANCEL = "cancel"
        # Runs once every dependency has settled, however they ended.
        CONTINUE = "continue"
        # Runs once every dependency has settled if at least one did not complete, else is
        # cancelled (a batch's on_failure callback).
        ONLY_ON_FAILURE = "only_on_failure"

    job = models.OneToOneField(Job, primary_key=True, on_delete=models.CASCADE, related_name="wait")
    on_failure = models.CharField(max_length=20, choices=OnFailure.choices, default=OnFailure.CANCEL)
    # The dependency whose failure or cancel cancelled this job; NULL otherwise.
    blocked_by = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )

    class Meta:
        db_table = "queue_app_job_waits"
        indexes = [
            # A retried job resumes the jobs its failure cancelled.
            models.Index(
                fields=["blocked_by"],
                name="idx_job_waits_blocked_by",
                condition=models.Q(blocked_by__isnull=False),
            ),
        ]


class Batch(models.Model):
    """A set of jobs with callbacks: each callback is a job waiting on every member, released
    (or cancelled, when its condition does not hold) by the settle of the last one."""

    id = models.UUIDField(primary_key=True, default=new_job_id, editable=False)
    name = models.CharField(max_length=200, blank=True, default="")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="job_batches",
        db_index=False,
    )
    created_at = models.DateTimeField(db_default=Now())
    on_complete = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    on_success = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    on_failure = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )

    class Meta:
        db_table = "queue_app_job_batches"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name or str(self.id)


class BatchMember(models.Model):
    job = models.OneToOneField(Job, primary_key=True, on_delete=models.CASCADE, related_name="batch_member")
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="members")

    class Meta:
        db_table = "queue_app_job_batch_members"
