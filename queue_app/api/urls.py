"""Routes under /api/: jobs, queues, stats, health, the OpenAPI schema and its Swagger UI."""

from django.http import HttpRequest, JsonResponse
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny
from rest_framework.routers import SimpleRouter

from queue_app.api import schema  # noqa: F401 - registers the schema extensions
from queue_app.api.errors import error_body
from queue_app.api.queues import QueueViewSet
from queue_app.api.views import HealthView, JobViewSet, StatsView


def not_found(request: HttpRequest) -> JsonResponse:
    return JsonResponse(error_body("not_found", "Not found."), status=404)


router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("queues", QueueViewSet, basename="queue")

# The schema and its docs are public; a stale or wrong token must not lock them.
public = {"authentication_classes": [], "permission_classes": [AllowAny]}

urlpatterns = [
    *router.urls,
    path("stats/", StatsView.as_view(), name="stats"),
    path("health/", HealthView.as_view(), name="health"),
    path("schema/", SpectacularAPIView.as_view(**public), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema", **public), name="docs"),
    # Log-in/out pages for session authentication in a browser (browsable API, Swagger UI).
    path("auth/", include("rest_framework.urls")),
    # Anything else under /api/ (ending in a slash, so APPEND_SLASH still redirects
    # the rest) is a JSON 404 too, not Django's HTML page.
    re_path(r"^.*/$", not_found),
]
