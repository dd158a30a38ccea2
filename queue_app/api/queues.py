"""Queue controls over HTTP: list the queues, pause and resume one, set its limits.

    GET   /api/queues/               every configured queue and its controls (queue_app.view_job)
    GET   /api/queues/{name}/        one queue
    POST  /api/queues/{name}/pause/  staff with queue_app.change_job
    POST  /api/queues/{name}/resume/
    PATCH /api/queues/{name}/        {"concurrency_limit": 2, "rate_limit": 10.5, "key_concurrency_limit": 1,
                                      "key_rate_limit": 0.5}; null removes a limit

Every change goes through queue_app.services, like the admin's and the command's.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema_view
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from queue_app import services
from queue_app.api.parsers import StrictJSONParser
from queue_app.api.permissions import CHANGE_ALL_JOBS, may_view_all_jobs
from queue_app.api.schema import extend_schema
from queue_app.api.serializers import ErrorSerializer
from queue_app.api.views import AUTH_ERRORS, QueueAPIDefaults
from queue_app.conf import queue_settings
from queue_app.engine.controls import MAX_CONCURRENCY_LIMIT, MAX_RATE_LIMIT, QueueControls


class QueueSerializer(serializers.Serializer):
    name = serializers.CharField()
    fifo = serializers.BooleanField(help_text="Strict FIFO queue (else ordered by priority).")
    paused = serializers.BooleanField()
    concurrency_limit = serializers.IntegerField(
        allow_null=True, help_text="At most this many of its jobs processing at once; null: no limit."
    )
    rate_limit = serializers.FloatField(
        allow_null=True, help_text="At most this many claims a second (burst: max(1, rate)); null: no limit."
    )
    key_concurrency_limit = serializers.IntegerField(
        allow_null=True,
        help_text="Per concurrency_key: at most this many of one key's jobs processing at once;"
        " null: no limit.",
    )
    key_rate_limit = serializers.FloatField(
        allow_null=True,
        help_text="Per concurrency_key: at most this many starts a second (burst: max(1, rate));"
        " null: no limit.",
    )


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


class QueueLimitsSerializer(serializers.Serializer):
    """A partial update: a field left out keeps its value, null removes the limit."""

    concurrency_limit = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_CONCURRENCY_LIMIT
    )
    rate_limit = StrictFloatField(required=False, allow_null=True, min_value=0.001, max_value=MAX_RATE_LIMIT)
    key_concurrency_limit = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_CONCURRENCY_LIMIT
    )
    key_rate_limit = StrictFloatField(
        required=False, allow_null=True, min_value=0.001, max_value=MAX_RATE_LIMIT
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(str(name) for name in self.initial_data if name not in self.fields)
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        if not attrs:
            raise serializers.ValidationError(
                {"non_field_errors": [f"Give one or more of {', '.join(self.fields)}."]}
            )
        return attrs


class CanControlQueues(BasePermission):
    """Reading needs queue_app.view_job; changing a queue needs staff with queue_app.change_job."""

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return may_view_all_jobs(user)
        return bool(user.is_staff and user.has_perm(CHANGE_ALL_JOBS))


def _body(controls: QueueControls) -> dict[str, Any]:
    return {
        "name": controls.name,
        "fifo": queue_settings().QUEUES[controls.name],
        "paused": controls.paused,
        "concurrency_limit": controls.concurrency_limit,
        "rate_limit": controls.rate_limit,
        "key_concurrency_limit": controls.key_concurrency_limit,
        "key_rate_limit": controls.key_rate_limit,
    }


NO_QUEUE = {404: OpenApiResponse(ErrorSerializer, description="No queue of that name is configured.")}


@extend_schema_view(
    # Reading needs queue_app.view_job: 401 without credentials, 403 without the permission.
    list=extend_schema(
        summary="List queues and their controls", responses={200: QueueSerializer(many=True), **AUTH_ERRORS}
    ),
    retrieve=extend_schema(
        summary="One queue's controls", responses={200: QueueSerializer, **NO_QUEUE, **AUTH_ERRORS}
    ),
)
class QueueViewSet(QueueAPIDefaults, viewsets.ViewSet):
    permission_classes = [CanControlQueues]
    parser_classes = [StrictJSONParser]
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def _controls(self, name: str) -> QueueControls:
        if name not in queue_settings().QUEUES:
            raise services.UnknownQueue(f"no queue named {name!r}")
        return services.queue_controls([name])[name]

    def list(self, request: Request) -> Response:
        return Response([_body(controls) for controls in services.queue_controls().values()])

    def retrieve(self, request: Request, name: str) -> Response:
        return Response(_body(self._controls(name)))

    @extend_schema(
        summary="Set a queue's limits (staff with queue_app.change_job)",
        request=QueueLimitsSerializer,
        responses={200: QueueSerializer, 400: OpenApiResponse(ErrorSerializer), **NO_QUEUE, **AUTH_ERRORS},
    )
    def partial_update(self, request: Request, name: str) -> Response:
        self._controls(name)
        serializer = QueueLimitsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        # A limit left out is left to the service, which keeps it under the queue's lock.
        return Response(_body(services.set_queue_limits(name, **serializer.validated_data)))

    @extend_schema(
        summary="Pause a queue (staff with queue_app.change_job)",
        description="Workers stop claiming its jobs; queued jobs stay queued, in place.",
        request=None,
        responses={200: QueueSerializer, **NO_QUEUE, **AUTH_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, name: str) -> Response:
        self._controls(name)
        return Response(_body(services.pause_queue(name)))

    @extend_schema(
        summary="Resume a queue (staff with queue_app.change_job)",
        request=None,
        responses={200: QueueSerializer, **NO_QUEUE, **AUTH_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, name: str) -> Response:
        self._controls(name)
        return Response(_body(services.resume_queue(name)))
