"""OpenAPI details computed when the schema is generated, so it matches the running system."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from rest_framework.serializers import ListSerializer

from queue_app.conf import queue_settings
from queue_app.handlers import registered_types
from queue_app.states import Status


class JobTypeFieldExtension(OpenApiSerializerFieldExtension):
    """``type`` is one of the registered handlers, listed as an enum."""

    target_class = "queue_app.api.serializers.JobTypeField"

    def map_serializer_field(self, auto_schema, direction) -> dict[str, Any]:
        return {"type": "string", "enum": registered_types(public=True)}


class QueueNameFieldExtension(OpenApiSerializerFieldExtension):
    """``queue`` is one of the configured queues, listed as an enum."""

    target_class = "queue_app.api.serializers.QueueNameField"

    def map_serializer_field(self, auto_schema, direction) -> dict[str, Any]:
        return {"type": "string", "enum": list(queue_settings().QUEUES), "default": "default"}


class UniqueStatesFieldExtension(OpenApiSerializerFieldExtension):
    """``unique_states`` lists the statuses as an enum of its own: built from its choice
    field, the enum's name collides with the job's ``status`` enum (a schema warning)."""

    target_class = "queue_app.api.serializers.UniqueStatesField"

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
