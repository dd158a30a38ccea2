"""URL routes: the admin and the REST API."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("queue_app.api.urls")),
]
