"""Workflows over HTTP: submit a graph of steps as one JSON document, read each step's status
and dependencies, cancel and retry the whole. Every change goes through queue_app.services;
the owner rules are the jobs' (queue_app/api/permissions.py)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from queue_app import services
from queue_app.api.conflicts import retry_transaction_conflicts
from queue_app.api.parsers import StrictJSONParser
from queue_app.api.permissions import CHANGE_ALL_JOBS, may_view_all_jobs
from queue_app.api.schema import extend_schema
from queue_app.api.serializers import ErrorSerializer, JobCreateSerializer, StrictSerializer
from queue_app.api.views import AUTH_ERRORS, QueueAPIDefaults
from queue_app.conf import queue_settings
from queue_app.engine import workflows
from queue_app.exceptions import JobsRejected, QueueError
from queue_app.models import JobWait, Workflow


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


NOT_FOUND = {404: _error("No such workflow, or not yours.")}


class WorkflowStepInSerializer(JobCreateSerializer):
    """One step: a job's fields (as for POST /api/jobs/), its id in the workflow and what it waits for."""

    id = serializers.CharField(max_length=200, help_text="The step's name, unique in the workflow.")
    depends_on = serializers.ListField(
        child=serializers.CharField(max_length=200),
        required=False,
        default=list,
        help_text="Ids of steps of this workflow (or ids of your existing jobs) it waits for.",
    )
    on_failure = serializers.ChoiceField(
        choices=["cancel", "continue"],
        required=False,
        allow_null=True,
        help_text="When a dependency fails or is cancelled: cancel this step (default) or run it anyway.",
    )


class WorkflowCreateSerializer(StrictSerializer):
    """A workflow: its steps, created together (all or nothing) and run as their dependencies allow."""

    name = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    on_failure = serializers.ChoiceField(
        choices=["cancel", "continue"],
        required=False,
        allow_null=True,
        help_text="Every step's default policy.",
    )
    steps = WorkflowStepInSerializer(many=True, help_text="1 to WORKFLOW_MAX_STEPS steps.")


class WorkflowStepSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The step's name.")
    job = serializers.UUIDField(help_text="The step's job.")
    job_url = serializers.CharField(help_text="The job's URL under /api/jobs/.")
    type = serializers.CharField()
    status = serializers.CharField()
    depends_on = serializers.ListField(child=serializers.CharField(), help_text="The steps it waits for.")


class WorkflowSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    status = serializers.CharField(
        help_text="running, or completed, failed or cancelled once every step has ended."
    )
    created_at = serializers.DateTimeField()
    steps = WorkflowStepSerializer(many=True)


class WorkflowActionSerializer(WorkflowSerializer):
    changed = serializers.IntegerField(help_text="How many steps the action changed.")


def workflow_body(workflow: Workflow) -> dict[str, Any]:
    steps = workflows.workflow_steps(workflow)
    return {
        "id": str(workflow.id),
        "name": workflow.name,
        "status": workflows.workflow_status(steps),
        "created_at": serializers.DateTimeField().to_representation(workflow.created_at),
        "steps": [
            {
                "id": step.name,
                "job": step.job_id,
                "job_url": reverse("job-detail", args=[step.job_id]),
                "type": step.type,
                "status": step.status,
                "depends_on": step.depends_on,
            }
            for step in steps
        ],
    }


def _step_errors(steps: Any) -> None:
    """ValidationError naming each bad step (by its id when it has one) before any service check."""
    limit = queue_settings().WORKFLOW_MAX_STEPS
    if not isinstance(steps, list) or not 1 <= len(steps) <= limit:
        raise ValidationError({"steps": [f"Must be a list of 1 to {limit} steps (WORKFLOW_MAX_STEPS)."]})
    errors: dict[str, Any] = {}
    seen: set[str] = set()
    for index, step in enumerate(steps):
        name = step.get("id") if isinstance(step, dict) and isinstance(step.get("id"), str) else f"#{index}"
        serializer = WorkflowStepInSerializer(data=step)
        try:
            valid = serializer.is_valid()
        except QueueError as exc:
            errors[name] = {exc.field or "non_field_errors": [exc.message]}
            continue
        if not valid:
            errors[name] = serializer.errors
        elif name in seen:
            errors[name] = {"id": ["Another step has this id."]}
        seen.add(name)
    if errors:
        raise ValidationError({"steps": errors})


@extend_schema_view(
    retrieve=extend_schema(
        summary="Get a workflow",
        description="Its status and every step's, with what each waits for.",
        responses={200: WorkflowSerializer, **NOT_FOUND, **AUTH_ERRORS},
    ),
)
class WorkflowViewSet(QueueAPIDefaults, viewsets.ViewSet):
    parser_classes = [StrictJSONParser]
    lookup_value_regex = "[^/]+"

    def _workflow(self, pk: str | None, *, change: bool = False) -> Workflow:
        try:
            workflow = workflows.get_workflow(pk)
        except QueueError:
            raise NotFound("No such workflow.") from None
        user = self.request.user
        if workflow.owner_id != user.pk and not may_view_all_jobs(user):
            raise NotFound("No such workflow.")  # another user's workflow: ids do not leak
        if change and workflow.owner_id != user.pk and not user.has_perm(CHANGE_ALL_JOBS):
            raise PermissionDenied(
                "You may see this workflow but not change it (needs queue_app.change_job)."
            )
        return workflow

    @extend_schema(
        summary="Submit a workflow",
        description=(
            "Every step is created in one transaction, or none is. A step waits for the steps its"
            " `depends_on` names and runs once they have all completed; by default it is cancelled"
            " when one of them fails or is cancelled (`on_failure: continue` runs it anyway). A"
            " cycle, an unknown dependency, an unknown type or more than WORKFLOW_MAX_STEPS steps"
            " is a 400 whose `errors.steps` names each bad step by its id."
        ),
        request=WorkflowCreateSerializer,
        responses={
            201: OpenApiResponse(WorkflowSerializer, description="Created."),
            400: _error("Invalid input; `errors.steps.<id>` names the fields of each bad step."),
            415: _error("The body is not application/json."),
            **AUTH_ERRORS,
        },
    )
    def create(self, request: Request) -> Response:
        data = request.data
        if not isinstance(data, dict):
            raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
        _step_errors(data.get("steps"))
        serializer = WorkflowCreateSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        graph = {}
        for step, raw in zip(serializer.validated_data["steps"], data["steps"], strict=True):
            job_request = WorkflowStepInSerializer(data=raw)
            job_request.is_valid()
            item = job_request.job_request()
            item.depends_on = list(step["depends_on"])
            item.on_failure = step.get("on_failure") or JobWait.OnFailure.CANCEL
            graph[step["id"]] = item
        try:
            workflow = retry_transaction_conflicts(
                lambda: services.enqueue_workflow(
                    graph,
                    name=serializer.validated_data["name"],
                    owner=request.user,
                    on_failure=serializer.validated_data.get("on_failure"),
                )
            )
        except JobsRejected as rejected:
            errors: dict[str, Any] = {}
            for error in rejected.errors:
                step = getattr(error, "step", None) or "non_field_errors"
                errors.setdefault(step, {}).setdefault(error.field or "non_field_errors", []).append(
                    error.message
                )
            raise ValidationError({"steps": errors}) from None
        except QueueError as error:
            step = getattr(error, "step", None)
            if step is None:
                raise
            raise ValidationError(
                {"steps": {step: {error.field or "non_field_errors": [error.message]}}}
            ) from None
        location = reverse("workflow-detail", args=[workflow.pk])
        return Response(
            workflow_body(workflow), status=status.HTTP_201_CREATED, headers={"Location": location}
        )

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(workflow_body(self._workflow(pk)))

    @extend_schema(
        summary="Cancel a workflow",
        description="Every step not yet finished is cancelled (a running one is asked to stop).",
        request=None,
        responses={200: WorkflowActionSerializer, **NOT_FOUND, **AUTH_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        workflow = self._workflow(pk, change=True)
        counts = services.cancel_workflow(
            workflow, reason=f"workflow cancelled by {request.user.get_username()}"
        )
        return Response({**workflow_body(workflow), "changed": counts.changed})

    @extend_schema(
        summary="Retry a workflow",
        description=(
            "Every failed or cancelled step is taken up again: queued when its dependencies have"
            " completed, else waiting for them. Completed steps keep their results."
        ),
        request=None,
        responses={200: WorkflowActionSerializer, **NOT_FOUND, **AUTH_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        workflow = self._workflow(pk, change=True)
        counts = services.retry_workflow(
            workflow, reason=f"workflow retried by {request.user.get_username()}"
        )
        return Response({**workflow_body(workflow), "changed": counts.changed})
