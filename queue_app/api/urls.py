"""Routes under /api/: jobs, workflows, queues, stats, health, the OpenAPI schema and its Swagger UI."""

from django.urls import include, path, re_path
from rest_framework.routers import SimpleRouter

from queue_app.api.docs import QueueDocsView, QueueSchemaView
from queue_app.api.fallbacks import api_root, not_found
from queue_app.api.queues import QueueViewSet
from queue_app.api.views import HealthView, JobViewSet, StatsView
from queue_app.api.workflows import WorkflowViewSet

router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("queues", QueueViewSet, basename="queue")
router.register("workflows", WorkflowViewSet, basename="workflow")

urlpatterns = [
    path("", api_root, name="api-root"),
    *router.urls,
    path("stats/", StatsView.as_view(), name="stats"),
    path("health/", HealthView.as_view(), name="health"),
    path("schema/", QueueSchemaView.as_view(), name="schema"),
    path("docs/", QueueDocsView.as_view(), name="docs"),
    # Log-in/out pages for session authentication in a browser (browsable API, Swagger UI).
    path("auth/", include("rest_framework.urls")),
    # Anything else under /api/ is a JSON 404 (or, missing its final slash, a JSON 308)
    # instead of Django's HTML page or APPEND_SLASH's empty redirect; [\s\S], as "." stops at
    # a newline ("/api/%0A").
    re_path(r"^[\s\S]*$", not_found),
]
