"""OpenAPI details computed when the schema is generated, so it matches the running system."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from drf_spectacular import utils
from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework.serializers import ListSerializer

from queue_app.conf import queue_settings
from queue_app.handlers import registered_types
from queue_app.states import Status


def extend_schema(**options: Any) -> Callable:
    """drf-spectacular's ``extend_schema``, built on drf-spectacular's AutoSchema whatever the
    project's ``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]`` says.

    On a view method, drf-spectacular builds the annotation on that setting when the method
    has no schema of its own yet; with DRF's default there, the schema view fails (a 500) in
    a project that did not point the setting at drf-spectacular.
    """
    decorate = utils.extend_schema(**options)

    def decorator(view_or_method):
        if not inspect.isclass(view_or_method):
            # Where drf-spectacular looks first for a method's schema (as an earlier annotation
            # leaves it); @action keeps its route options in the same dict.
            if not hasattr(view_or_method, "kwargs"):
                view_or_method.kwargs = {}
            view_or_method.kwargs.setdefault("schema", AutoSchema)
        return decorate(view_or_method)

    return decorator


class JobTypeFieldExtension(OpenApiSerializerFieldExtension):
    """``type`` is one of the registered handlers, listed as an enum."""

    target_class = "queue_app.api.fields.JobTypeField"

    def map_serializer_field(self, auto_schema, direction) -> dict[str, Any]:
        return {"type": "string", "enum": registered_types(public=True)}


class QueueNameFieldExtension(OpenApiSerializerFieldExtension):
    """``queue`` is one of the configured queues, listed as an enum."""

    target_class = "queue_app.api.fields.QueueNameField"

    def map_serializer_field(self, auto_schema, direction) -> dict[str, Any]:
        return {"type": "string", "enum": list(queue_settings().QUEUES), "default": "default"}


class UniqueStatesFieldExtension(OpenApiSerializerFieldExtension):
    """``unique_states`` lists the statuses as an enum of its own: built from its choice
    field, the enum's name collides with the job's ``status`` enum (a schema warning)."""

    target_class = "queue_app.api.fields.UniqueStatesField"

    def map_serializer_field(self, auto_schema, direction) -> dict[str, Any]:
        statuses = {"type": "string", "enum": list(Status.values)}
        return {"type": "array", "items": statuses, "minItems": 1, "nullable": True}


class StrictSerializerExtension(OpenApiSerializerExtension):
    """Request bodies refuse unknown fields, so the schema says additionalProperties: false."""

    target_class = "queue_app.api.serializers.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction) -> dict[str, Any]:
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = False
        for name, field in self.target.fields.items():
            if isinstance(field, ListSerializer) and name in schema["properties"]:
                if field.min_length is not None:
                    schema["properties"][name]["minItems"] = field.min_length
                if field.max_length is not None:
                    schema["properties"][name]["maxItems"] = field.max_length
        return schema


class RetriedJobSerializerExtension(OpenApiSerializerExtension):
    """The retry's answer is the job's component plus ``max_attempts_raised`` (allOf): listed
    again in full, the job's ``status`` enum would appear in two components, and
    drf-spectacular would name it by a hash, with a schema warning in every project."""

    target_class = "queue_app.api.serializers.RetriedJobSerializer"

    def map_serializer(self, auto_schema, direction) -> dict[str, Any]:
        from queue_app.api.serializers import JobSerializer

        job = auto_schema.resolve_serializer(JobSerializer, direction).ref
        raised = auto_schema._map_serializer_field(self.target.fields["max_attempts_raised"], direction)
        extra = {"type": "object", "properties": {"max_attempts_raised": raised}}
        return {"allOf": [job, extra]}
