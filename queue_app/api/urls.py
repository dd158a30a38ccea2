"""Routes under /api/: jobs, stats, health, the OpenAPI schema and its Swagger UI."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny
from rest_framework.routers import SimpleRouter

from queue_app.api import schema  # noqa: F401 - registers the schema extensions
from queue_app.api.views import HealthView, JobViewSet, StatsView

router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")

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
]
