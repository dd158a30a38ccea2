"""The API's OpenAPI schema and its Swagger UI page, as views that need nothing from the project.

A host project's ``REST_FRAMEWORK`` and ``SPECTACULAR_SETTINGS`` describe its own
API, if it has one: the schema here covers the queue's views only (each carries
drf-spectacular's AutoSchema, see QueueAPIDefaults), with its own title, and the
Swagger UI loads its files from drf-spectacular-sidecar's static files, never a CDN.
"""

from __future__ import annotations

from urllib.parse import urljoin

from django.templatetags.static import static
from drf_spectacular.generators import EndpointEnumerator, SchemaGenerator
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny

from queue_app.api.schema import extend_schema
from queue_app.api.views import QueueAPIDefaults

TITLE = "Job queue API"
SCHEMA_SETTINGS = {
    "TITLE": TITLE,
    "DESCRIPTION": "Submit, inspect, cancel and retry durable background jobs.",
    "VERSION": "1.0.0",
    # Separate request and response components: a create body is not the job it returns.
    "COMPONENT_SPLIT_REQUEST": True,
}
SWAGGER_UI_FILES = "drf_spectacular_sidecar/swagger-ui-dist/"


class QueueEndpoints(EndpointEnumerator):
    """The queue's API views only, wherever the project mounts them."""

    def should_include_endpoint(self, path, callback, *args, **kwargs) -> bool:
        view = getattr(callback, "cls", None)
        return (
            view is not None
            and issubclass(view, QueueAPIDefaults)
            and super().should_include_endpoint(path, callback, *args, **kwargs)
        )


class QueueSchemaGenerator(SchemaGenerator):
    endpoint_inspector_cls = QueueEndpoints


class QueueSchemaView(SpectacularAPIView):
    """GET the OpenAPI 3 schema (YAML, or JSON with ``?format=json``); public, like the docs page:
    a stale or wrong token must not lock them."""

    authentication_classes = []
    permission_classes = [AllowAny]
    schema = AutoSchema()
    generator_class = QueueSchemaGenerator
    custom_settings = SCHEMA_SETTINGS

    # Left out of every schema, the project's own too (drf-spectacular's annotation of this
    # method is built on the project's DEFAULT_SCHEMA_CLASS, which may be DRF's).
    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class QueueDocsView(SpectacularSwaggerSplitView):
    """Swagger UI for the schema. The split view serves its start-up script from ``?script``,
    so no inline script needs allowing by a Content-Security-Policy."""

    authentication_classes = []
    permission_classes = [AllowAny]
    schema = AutoSchema()
    title = TITLE
    template_name = "queue_app/swagger_ui.html"
    # A page to GET: DRF's OPTIONS answer has no template context to render it with.
    http_method_names = ["get", "head"]

    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        # The schema beside this page, wherever the project mounts the API and whatever other
        # view of the project is also named "schema".
        self.url = urljoin(request.path, "../schema/")
        return super().get(request, *args, **kwargs)

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return static(SWAGGER_UI_FILES + filename)

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return static(SWAGGER_UI_FILES + "favicon-32x32.png")
