"""Request and response shapes of the API.

Input fields are strict about JSON types (fields.py). Serializers check shape
and types only; the rules (registered types, configured queues, payload size and
depth) are the service's, applied once by ``enqueue_jobs``, which names every job
at fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from rest_framework import serializers
from rest_framework.reverse import reverse

from queue_app.api.fields import (
    DelaySecondsField,
    ExpiresInField,
    JobTypeField,
    OffsetDateTimeField,
    PayloadField,
    PriorityField,
    QueueNameField,
    ResultField,
    StrictCharField,
    StrictIntegerField,
    UniqueForField,
    UniqueStatesField,
)
from queue_app.engine.uniqueness import MAX_UNIQUE_KEY_LENGTH
from queue_app.exceptions import UnknownJobType
from queue_app.handlers import get_handler
from queue_app.models import Job, JobLog
from queue_app.services import MAX_ATTEMPTS_LIMIT, JobRequest, check_run_at
from queue_app.states import DEFAULT_UNIQUE_STATES, Priority, Status

MAX_BULK_JOBS = 1000


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know, so a typo is an error rather than a silent default."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(name) for name in data if name not in self.fields)
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class JobCreateSerializer(StrictSerializer):
    """A job to run: its type and payload, and optionally when, where and how often to try it."""

    type = JobTypeField(help_text="A registered job type.")
    payload = PayloadField(required=False, default=dict, help_text="A JSON object (size and depth limited).")
    priority = PriorityField(
        default=Priority.MEDIUM.value,
        help_text="high, medium or low, or an integer from -100 to 100 (high is 10, medium 0, low -10);"
        " higher runs sooner.",
    )
    queue = QueueNameField(default="default", help_text="A configured queue.")
    max_attempts = StrictIntegerField(
        min_value=1,
        max_value=MAX_ATTEMPTS_LIMIT,
        required=False,
        allow_null=True,
        help_text="Defaults to the handler's, then to JOBQUEUE DEFAULT_MAX_ATTEMPTS.",
    )
    run_at = OffsetDateTimeField(
        required=False, allow_null=True, help_text="Earliest start, ISO 8601 with an offset."
    )
    delay_seconds = DelaySecondsField(
        required=False, allow_null=True, help_text="Earliest start, in seconds from now."
    )
    idempotency_key = StrictCharField(
        required=False,
        allow_null=True,
        max_length=255,
        help_text="Or the Idempotency-Key header. A repeat with the same body returns the same job.",
    )
    unique_key = StrictCharField(
        required=False,
        allow_null=True,
        max_length=MAX_UNIQUE_KEY_LENGTH,
        help_text="No second job of yours with this key while one is in unique_states (within"
        " unique_for): the request returns that job, with status 200.",
    )
    unique_for = UniqueForField(
        required=False,
        allow_null=True,
        help_text="Seconds: only a job created this recently holds its unique_key. Default: no limit.",
    )
    unique_states = UniqueStatesField(
        required=False,
        allow_null=True,
        help_text="The statuses in which a job holds its unique_key. Default:"
        f" {', '.join(sorted(DEFAULT_UNIQUE_STATES))}; add completed for at most one job per unique_for.",
    )
    expires_at = OffsetDateTimeField(
        required=False,
        allow_null=True,
        help_text="Not started by then, the job never runs: it ends as expired. ISO 8601 with an offset.",
    )
    expires_in = ExpiresInField(
        required=False, allow_null=True, help_text="The same as expires_at, in seconds from now."
    )
    concurrency_key = StrictCharField(
        required=False,
        allow_null=True,
        max_length=255,
        help_text="Jobs sharing a key (e.g. customer:42) share their queue's per-key limits"
        " (key_concurrency_limit, key_rate_limit).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("expires_at") is not None and attrs.get("expires_in") is not None:
            message = "Give expires_at or expires_in, not both."
            raise serializers.ValidationError({"expires_at": [message], "expires_in": [message]})
        if attrs.get("run_at") is not None and attrs.get("delay_seconds") is not None:
            message = "Give run_at or delay_seconds, not both."
            raise serializers.ValidationError({"run_at": [message], "delay_seconds": [message]})
        # A delay becomes its start time once, here, so the check and the job agree.
        if attrs.get("delay_seconds") is not None:
            attrs["run_at"] = timezone.now() + timedelta(seconds=attrs["delay_seconds"])
            check_run_at(attrs["run_at"], field="delay_seconds")
        elif attrs.get("run_at") is not None:
            check_run_at(attrs["run_at"])
        if _is_internal(attrs["type"]):
            # Only code names an internal type (django.task); to the API it does not exist.
            raise UnknownJobType(f"{attrs['type']!r} is not a registered job type", field="type")
        return attrs

    def job_request(self) -> JobRequest:
        data = self.validated_data
        return JobRequest(
            type=data["type"],
            payload=data["payload"],
            priority=data["priority"],
            queue=data["queue"],
            run_at=data.get("run_at"),
            delay_seconds=data.get("delay_seconds"),
            max_attempts=data.get("max_attempts"),
            idempotency_key=data.get("idempotency_key"),
            unique_key=data.get("unique_key"),
            unique_for=data.get("unique_for"),
            unique_states=data.get("unique_states"),
            expires_at=data.get("expires_at"),
            expires_in=data.get("expires_in"),
            concurrency_key=data.get("concurrency_key"),
        )


def _is_internal(job_type: str) -> bool:
    try:
        return get_handler(job_type).internal
    except UnknownJobType:
        return False  # unregistered: the service names it


class BulkCreateSerializer(StrictSerializer):
    """Up to 1,000 jobs, created together or not at all."""

    # The view validates the items one by one, to name each one at fault.

    jobs = JobCreateSerializer(many=True, min_length=1, max_length=MAX_BULK_JOBS)


class JobSerializer(serializers.ModelSerializer):
    payload = PayloadField()
    result = ResultField()
    logs = serializers.HyperlinkedIdentityField(view_name="job-logs", help_text="The job's log trail.")
    run_at = serializers.DateTimeField(
        source="enqueued_at",
        read_only=True,
        help_text="When the job is (or was) due to run: the run_at or delay_seconds it was submitted"
        " with, a retry's backoff end, else when it was submitted or retried by hand.",
    )
    next_retry_at = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="Kept for older clients: run_at while the job waits for that time, else null.",
    )
    last_error = serializers.CharField(
        read_only=True, help_text="'ExceptionType: message' of the last failed attempt, else empty."
    )
    last_error_traceback = serializers.SerializerMethodField(
        help_text="Its traceback; null unless the caller has the queue_app.view_job permission."
    )
    snoozes = serializers.IntegerField(
        read_only=True,
        help_text="Times the job snoozed (its handler raised Snooze): each put it back to wait"
        " without counting an attempt.",
    )
    progress = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="The latest progress its running attempt reported, from 0 to 1; null until one did.",
    )
    progress_message = serializers.CharField(
        read_only=True, help_text="The message reported with that progress, else empty."
    )
    progress_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="When that progress was written; null until then."
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "type",
            "queue",
            "payload",
            "priority",
            "priority_value",
            "status",
            "attempts",
            "max_attempts",
            "snoozes",
            "run_at",
            "next_retry_at",
            "created_at",
            "started_at",
            "completed_at",
            "progress",
            "progress_message",
            "progress_at",
            "last_error",
            "last_error_traceback",
            "result",
            "idempotency_key",
            "unique_key",
            "expires_at",
            "concurrency_key",
            "logs",
        ]
        read_only_fields = fields

    def get_last_error_traceback(self, job: Job) -> str | None:
        """Server paths and source lines are for operators, not for every job owner."""
        request = self.context.get("request")
        if request is None or not request.user.has_perm("queue_app.view_job"):
            return None
        return job.last_error_traceback


class MaxAttemptsRaisedSerializer(serializers.Serializer):
    before = serializers.IntegerField(read_only=True)
    after = serializers.IntegerField(read_only=True)


class RetriedJobSerializer(JobSerializer):
    """The retried job, and whether the retry raised its max_attempts (only in the schema:
    the view builds the body with job_body, like every response about jobs)."""

    max_attempts_raised = MaxAttemptsRaisedSerializer(
        read_only=True,
        allow_null=True,
        help_text="Set when the job had used every attempt: max_attempts rose from `before` to"
        " `after` (one more than its attempts) to allow this run, as attempts are never reset"
        " (they number the attempts in the job's log). Null when the retry left max_attempts as it was.",
    )

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "max_attempts_raised"]
        read_only_fields = fields


_timestamp = serializers.DateTimeField(read_only=True)


def job_body(job: Job, request) -> dict[str, Any]:
    """What ``JobSerializer(job, context={"request": request}).data`` is, key for key.

    A ModelSerializer builds its fields from the model for every instance, which
    costs more than the rest of a request; every response about jobs (one job,
    a page of the list, bulk's result) builds the same body directly.
    JobSerializer stays the definition (the schema); a test holds the two equal.
    """

    def timestamp(value: datetime | None) -> str | None:
        return None if value is None else _timestamp.to_representation(value)

    def text(value: Any) -> str | None:
        return None if value is None else str(value)

    may_see_traceback = request is not None and request.user.has_perm("queue_app.view_job")
    return {
        "id": text(job.id),
        "type": text(job.type),
        "queue": text(job.queue),
        "payload": job.payload,
        "priority": text(job.priority),
        "priority_value": job.priority_value,
        "status": text(job.status),
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "snoozes": job.snoozes,
        "run_at": timestamp(job.enqueued_at),
        "next_retry_at": timestamp(job.next_retry_at),
        "created_at": timestamp(job.created_at),
        "started_at": timestamp(job.started_at),
        "completed_at": timestamp(job.completed_at),
        "progress": job.progress,
        "progress_message": text(job.progress_message),
        "progress_at": timestamp(job.progress_at),
        "last_error": text(job.last_error),
        "last_error_traceback": job.last_error_traceback if may_see_traceback else None,
        "result": job.result,
        "idempotency_key": text(job.idempotency_key),
        "unique_key": text(job.unique_key),
        "expires_at": timestamp(job.expires_at),
        "concurrency_key": text(job.concurrency_key),
        "logs": None if job.pk is None else reverse("job-logs", kwargs={"pk": job.pk}, request=request),
    }


class BulkResultSerializer(serializers.Serializer):
    jobs = JobSerializer(many=True)


class JobLogSerializer(serializers.ModelSerializer):
    extra = PayloadField()

    class Meta:
        model = JobLog
        fields = ["id", "created_at", "level", "event", "message", "extra"]
        read_only_fields = fields


# --- documentation-only shapes (the views build these bodies directly) -------


class ItemErrorSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="Position of the rejected job in the request.")
    code = serializers.CharField()
    detail = serializers.CharField()
    errors = serializers.DictField(child=serializers.JSONField())


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Machine-readable, e.g. invalid, unknown_type, conflict.")
    detail = serializers.CharField(help_text="Human-readable, names the field first when there is one.")
    errors = serializers.DictField(
        child=serializers.JSONField(), required=False, help_text="Messages by field name."
    )
    items = ItemErrorSerializer(many=True, required=False, help_text="Bulk only: the rejected jobs.")


# One integer per status, so the documented shape follows states.py.
StatusCountsSerializer = type(
    "StatusCountsSerializer",
    (serializers.Serializer,),
    {status: serializers.IntegerField() for status in Status.values},
)


class JobCountsSerializer(serializers.Serializer):
    total = serializers.IntegerField()
    by_status = StatusCountsSerializer()
    by_queue = serializers.DictField(child=StatusCountsSerializer())


class RedisDepthSerializer(serializers.Serializer):
    priority = serializers.IntegerField(help_text="Ready ids in the priority sorted set.")
    fifo = serializers.IntegerField(help_text="Ready ids in the FIFO list.")
    retry = serializers.IntegerField(help_text="Ids waiting for their time in the retry set.")


class OutboxStatsSerializer(serializers.Serializer):
    pending = serializers.IntegerField(help_text="Rows not yet relayed to Redis.")
    oldest_pending_age_seconds = serializers.FloatField(allow_null=True)


class StatsSerializer(serializers.Serializer):
    generated_at = serializers.DateTimeField()
    jobs = JobCountsSerializer()
    oldest_queued_age_seconds = serializers.FloatField(
        allow_null=True, help_text="How long the oldest job that is due has waited."
    )
    outbox = OutboxStatsSerializer()
    redis = serializers.DictField(
        child=RedisDepthSerializer(), allow_null=True, help_text="By queue; null when Redis does not answer."
    )
    redis_error = serializers.CharField(allow_null=True)
    estimated = serializers.ListField(
        child=serializers.CharField(),
        help_text=(
            "Figures that are PostgreSQL's estimates, not counts (a status with more than 10,000 jobs, "
            "e.g. jobs.by_status.completed, and its by_queue counts; oldest_queued_age_seconds when "
            "many jobs are queued). Empty when every figure is exact."
        ),
    )


class HealthSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["ok", "unavailable"])
    detail = serializers.CharField(required=False)
    checks = serializers.DictField(child=serializers.CharField(), help_text='"ok" or the error, by store.')
