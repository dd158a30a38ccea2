"""HTTP endpoints. Every change to a job goes through queue_app.services."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.db import DatabaseError
from django.db.models import QuerySet
from django.urls import reverse
from django.utils.decorators import method_decorator
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, PermissionDenied
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from queue_app import services
from queue_app.api import health, stats
from queue_app.api.auth_failures import LimitedTokenAuthentication
from queue_app.api.conflicts import retry_transaction_conflicts
from queue_app.api.errors import BulkRejected, clean, exception_handler, item_error, queue_item_error
from queue_app.api.filters import JobFilter
from queue_app.api.pagination import JobLogPagination, JobPagination
from queue_app.api.parsers import StrictJSONParser
from queue_app.api.permissions import CanViewAllJobs, may_change_job, may_view_all_jobs
from queue_app.api.schema import extend_schema
from queue_app.api.serializers import (
    MAX_BULK_JOBS,
    BulkCreateSerializer,
    BulkResultSerializer,
    ErrorSerializer,
    HealthSerializer,
    JobCreateSerializer,
    JobLogSerializer,
    JobSerializer,
    RetriedJobSerializer,
    StatsSerializer,
    job_body,
)
from queue_app.broker.client import REDIS_ERRORS
from queue_app.exceptions import JobsRejected, QueueError
from queue_app.models import Job
from queue_app.replica import reads_replica
from queue_app.services import JobRequest

IDEMPOTENCY_HEADER = "Idempotency-Key"


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


AUTH_ERRORS = {
    401: _error("Not authenticated."),
    403: _error("Not allowed (e.g. a session request without its CSRF token)."),
    429: _error("Throttled; see the Retry-After header."),
}
NOT_FOUND = {404: _error("No such job, or not yours.")}
CREATE_ERRORS = {
    400: _error("Invalid input; `errors` names the fields."),
    409: _error("The request collided with a concurrent one (`transaction_conflict`); send it again."),
    413: _error("The payload or the request body is too large."),
    415: _error("The body is not application/json."),
    422: _error("The idempotency key was used with a different request."),
}
IDEMPOTENCY_KEY_HEADER = OpenApiParameter(
    IDEMPOTENCY_HEADER,
    {"type": "string", "minLength": 1, "maxLength": 255},
    OpenApiParameter.HEADER,
    required=False,
    description="Alternative to the idempotency_key field.",
)


class QueueAPIDefaults:
    """The API's own authentication, permissions, errors and schema, so a host project needs no
    REST_FRAMEWORK setting for it (other REST_FRAMEWORK settings, e.g. throttles, still apply)."""

    authentication_classes = [LimitedTokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    schema = AutoSchema()

    def get_exception_handler(self):
        return exception_handler


@extend_schema_view(
    list=extend_schema(
        summary="List jobs",
        description="Your jobs (all jobs for staff), newest first by default, cursor-paginated.",
        responses={200: JobSerializer(many=True), 400: _error("Invalid filter or cursor."), **AUTH_ERRORS},
    ),
    retrieve=extend_schema(summary="Get a job", responses={200: JobSerializer, **NOT_FOUND, **AUTH_ERRORS}),
)
class JobViewSet(QueueAPIDefaults, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = JobSerializer
    parser_classes = [StrictJSONParser]
    filter_backends = [DjangoFilterBackend]
    filterset_class = JobFilter
    pagination_class = JobPagination
    # Any path segment reaches the view, so a malformed id is a JSON 404 like any other.
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> QuerySet[Job]:
        jobs = Job.objects.all()
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return jobs.none()
        if not may_view_all_jobs(self.request.user):
            # Another user's job is a 404, so ids do not leak.
            jobs = jobs.filter(owner=self.request.user)
        return jobs

    def filter_queryset(self, queryset: QuerySet) -> QuerySet:
        # Filters are for the list; a detail route ignores the query string.
        return super().filter_queryset(queryset) if self.action == "list" else queryset

    def _job_to_change(self) -> Job:
        """The job of this URL, when the user may change it (403 when they may only see it)."""
        job = self.get_object()
        if not may_change_job(self.request.user, job):
            raise PermissionDenied("You may see this job but not change it (needs queue_app.change_job).")
        return job

    def _respond_with_job(self, job: Job, status_code: int = status.HTTP_200_OK, **kwargs: Any) -> Response:
        return Response(job_body(job, self.request), status=status_code, **kwargs)

    # A job's status is polled more than anything else is asked: its reads build the body
    # with job_body, like every other response about jobs, not with JobSerializer.
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self._respond_with_job(self.get_object())

    # The list is history, read from the replica when there is one; a job's own URL (above)
    # reads the primary: its caller acts on what it says (cancel, retry) or polls for a change.
    @method_decorator(reads_replica)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response([job_body(job, request) for job in page])

    @extend_schema(
        summary="Submit a job",
        request=JobCreateSerializer,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={
            201: OpenApiResponse(JobSerializer, description="Created."),
            200: OpenApiResponse(
                JobSerializer,
                description="The job an earlier request with this idempotency key made, or the job"
                " holding this unique_key.",
            ),
            **CREATE_ERRORS,
            **AUTH_ERRORS,
        },
    )
    def create(self, request: Request) -> Response:
        serializer = JobCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        job_request = serializer.job_request()
        job_request.idempotency_key = self._idempotency_key(request, job_request.idempotency_key)
        try:
            job = retry_transaction_conflicts(
                lambda: services.enqueue_jobs([job_request], owner=request.user)
            )[0]
        except JobsRejected as rejected:
            raise rejected.errors[0] from None  # one job: its own error, not a bulk rejection
        if not job.was_created:
            return self._respond_with_job(job)
        location = reverse("job-detail", args=[job.pk])
        return self._respond_with_job(job, status.HTTP_201_CREATED, headers={"Location": location})

    @staticmethod
    def _idempotency_key(request: Request, body_key: str | None) -> str | None:
        header_key = request.headers.get(IDEMPOTENCY_HEADER)
        if header_key is None:
            return body_key
        if body_key is not None and body_key != header_key:
            raise serializers.ValidationError(
                {"idempotency_key": [f"Differs from the {IDEMPOTENCY_HEADER} header; send one of them."]}
            )
        return header_key

    @extend_schema(
        summary="Submit many jobs at once",
        description=(
            f"Up to {MAX_BULK_JOBS} jobs in one transaction: all are created or none is. "
            "A rejection lists each job at fault in `items`. Status 201 when at least one job "
            "was created, 200 when every job matched an earlier idempotency key or a held "
            "unique_key. Jobs of one request sharing a unique_key get the first one's job."
        ),
        request=BulkCreateSerializer,
        responses={
            201: OpenApiResponse(BulkResultSerializer, description="Created, in request order."),
            200: OpenApiResponse(
                BulkResultSerializer, description="All were earlier jobs (idempotency or unique keys)."
            ),
            **CREATE_ERRORS,
            **AUTH_ERRORS,
        },
    )
    @action(detail=False, methods=["post"])
    def bulk(self, request: Request) -> Response:
        if IDEMPOTENCY_HEADER in request.headers:
            raise serializers.ValidationError(
                {"idempotency_key": ["Give each job its own idempotency_key; the header is for single jobs."]}
            )
        items = self._bulk_items(request.data)
        requests, positions, failures = self._read_items(items)
        if failures:
            # Name every job at fault: the service's rules too, for the jobs whose shape was right.
            try:
                services.validate_jobs(requests)
            except JobsRejected as rejected:
                failures += [queue_item_error(error, positions[error.index]) for error in rejected.errors]
            raise BulkRejected(failures, len(items))
        try:
            jobs = retry_transaction_conflicts(lambda: services.enqueue_jobs(requests, owner=request.user))
        except JobsRejected as rejected:
            raise BulkRejected([queue_item_error(error) for error in rejected.errors], len(items)) from None
        created = any(job.was_created for job in jobs)
        data = {"jobs": [job_body(job, request) for job in jobs]}
        return Response(data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @staticmethod
    def _bulk_items(data: Any) -> list[Any]:
        """The envelope: {"jobs": [...]} with 1..MAX_BULK_JOBS items and nothing else."""
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        unknown = sorted(str(name) for name in data if name != "jobs")
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        items = data.get("jobs")
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_BULK_JOBS:
            raise serializers.ValidationError({"jobs": [f"Must be a list of 1 to {MAX_BULK_JOBS} jobs."]})
        return items

    @staticmethod
    def _read_items(items: list[Any]) -> tuple[list[JobRequest], list[int], list[dict[str, Any]]]:
        """(requests of the well-formed items, their positions in ``items``, the malformed ones)."""
        requests: list[JobRequest] = []
        positions: list[int] = []
        failures: list[dict[str, Any]] = []
        for index, item in enumerate(items):
            serializer = JobCreateSerializer(data=item)
            try:
                if not serializer.is_valid():
                    failures.append(item_error(index, 400, "invalid", serializer.errors))
                    continue
            except QueueError as exc:
                failures.append(queue_item_error(exc, index))
                continue
            requests.append(serializer.job_request())
            positions.append(index)
        return requests, positions, failures

    @extend_schema(
        summary="A job's log trail",
        description="Every transition and decision, oldest first.",
        responses={
            200: JobLogSerializer(many=True),
            400: _error("Invalid cursor or page size."),
            **NOT_FOUND,
            **AUTH_ERRORS,
        },
    )
    @action(detail=True, methods=["get"], pagination_class=JobLogPagination, filterset_class=None)
    def logs(self, request: Request, pk: str | None = None) -> Response:
        job = self.get_object()
        page = self.paginate_queryset(job.logs.all())
        return self.get_paginated_response(JobLogSerializer(page, many=True).data)

    @extend_schema(
        summary="Cancel a job",
        description="Queued or running jobs only; a running handler's result is then discarded.",
        request=None,
        responses={
            200: JobSerializer,
            **NOT_FOUND,
            409: _error("The job has already finished."),
            **AUTH_ERRORS,
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job_id = self._job_to_change().pk
        job = services.cancel_job(job_id, reason=f"cancelled by {request.user.get_username()}")
        return self._respond_with_job(job)

    @extend_schema(
        summary="Retry a job",
        description=(
            "Failed or cancelled jobs only; it is queued again with one more attempt allowed. Attempts"
            " are never reset (they number the attempts in the job's log): a job that used every"
            " attempt has its max_attempts raised to one more than its attempts, which"
            " `max_attempts_raised` and the job's log trail say."
        ),
        request=None,
        responses={
            200: RetriedJobSerializer,
            **NOT_FOUND,
            409: _error("The job is not failed or cancelled."),
            **AUTH_ERRORS,
        },
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        before = self._job_to_change()
        job = services.retry_job(before.pk, reason=f"retried by {request.user.get_username()}")
        # Only a retry raises max_attempts: the difference is this retry's (unless, in the
        # moment since the read above, another retry ran the job and it failed again; the
        # log rows hold each retry's own figures).
        raised = None
        if job.max_attempts != before.max_attempts:
            raised = {"before": before.max_attempts, "after": job.max_attempts}
        return Response({**job_body(job, request), "max_attempts_raised": raised})


class StatsView(QueueAPIDefaults, APIView):
    """System-wide figures: they count every user's jobs, so they need queue_app.view_job."""

    permission_classes = [CanViewAllJobs]

    @extend_schema(
        summary="Queue statistics (needs queue_app.view_job)",
        description=(
            "Job counts by status and queue (PostgreSQL), ids in each Redis structure, the "
            "outbox rows not yet relayed, and how long the oldest due job has waited."
        ),
        responses={200: StatsSerializer, **AUTH_ERRORS},
    )
    @method_decorator(reads_replica)  # a read-only snapshot, like the dashboard
    def get(self, request: Request) -> Response:
        return Response(StatsSerializer(stats.collect()).data)


class HealthView(QueueAPIDefaults, APIView):
    """No authentication needed and no throttling: load balancers probe it.

    The errors name hosts and ports, so only staff see them; anyone else
    learns which store is down.
    """

    permission_classes = [AllowAny]
    throttle_classes: list = []

    def get_authenticators(self) -> list:
        # A probe needs no credentials, so a wrong token sent with one is not a failed login.
        return [LimitedTokenAuthentication(counts_failures=False), SessionAuthentication()]

    def perform_authentication(self, request: Request) -> None:
        # Credentials only decide how much is shown: neither bad ones nor a store that
        # cannot check them turns a probe away (the checks below report the store).
        try:
            request.user  # noqa: B018 - authenticates
        except (APIException, DatabaseError, *REDIS_ERRORS):
            request.user = AnonymousUser()

    @staticmethod
    def _shows_details(request: Request) -> bool:
        return bool(request.user and request.user.is_staff)

    @extend_schema(
        summary="Health of PostgreSQL and Redis",
        responses={
            200: OpenApiResponse(HealthSerializer, description="Both stores answer."),
            503: OpenApiResponse(
                HealthSerializer,
                description="A store does not answer; `detail` names it (the errors: staff only).",
            ),
        },
    )
    def get(self, request: Request) -> Response:
        checks = health.check_all()
        failing = [store for store, result in checks.items() if result != "ok"]
        if not failing:
            return Response({"status": "ok", "checks": checks})
        if not self._shows_details(request):
            checks = {store: "ok" if result == "ok" else "unavailable" for store, result in checks.items()}
        body = {"status": "unavailable", "detail": f"{' and '.join(failing)} not answering", "checks": checks}
        return Response(clean(body), status=status.HTTP_503_SERVICE_UNAVAILABLE)
