"""Routes under /api/: jobs, queues, stats, health, the OpenAPI schema and its Swagger UI."""

from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny
from rest_framework.routers import SimpleRouter

from queue_app.api import schema  # noqa: F401 - registers the schema extensions
from queue_app.api.fallbacks import api_root, not_found
from queue_app.api.queues import QueueViewSet
from queue_app.api.views import HealthView, JobViewSet, StatsView

router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("queues", QueueViewSet, basename="queue")

# The schema and its docs are public; a stale or wrong token must not lock them.
public = {"authentication_classes": [], "permission_classes": [AllowAny]}

urlpatterns = [
    path("", api_root, name="api-root"),
    *router.urls,
    path("stats/", StatsView.as_view(), name="stats"),
    path("health/", HealthView.as_view(), name="health"),
    path("schema/", SpectacularAPIView.as_view(**public), name="schema"),
    # The split view serves its start-up script from ?script: no inline script for the CSP to allow.
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="schema",
            template_name="queue_app/swagger_ui.html",
            # A page to GET: DRF's OPTIONS answer has no template context to render it with.
            http_method_names=["get", "head"],
            **public,
        ),
        name="docs",
    ),
    # Log-in/out pages for session authentication in a browser (browsable API, Swagger UI).
    path("auth/", include("rest_framework.urls")),
    # Anything else under /api/ is a JSON 404 (or, missing its final slash, a JSON 308)
    # instead of Django's HTML page or APPEND_SLASH's empty redirect; [\s\S], as "." stops at
    # a newline ("/api/%0A").
    re_path(r"^[\s\S]*$", not_found),
]
