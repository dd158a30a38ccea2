"""URL routes: the admin, the REST API and the Prometheus metrics."""

from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from queue_app.api.metrics import metrics_view

# No public site beside the admin and the API: no "View site" link to a page that does not exist.
admin.site.site_url = None

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("queue_app.api.urls")),
    path("metrics", metrics_view, name="metrics"),
    # Browsers ask for /favicon.ico whatever the page says: the admin's icon, not a 404 line.
    path("favicon.ico", RedirectView.as_view(url=static("queue_app/favicon.svg"), permanent=True)),
]

# With DEBUG only (an empty list otherwise): the app servers serve static files in
# development; in production a proxy serves STATIC_ROOT after collectstatic.
urlpatterns += staticfiles_urlpatterns()
