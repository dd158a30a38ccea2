"""JSON answers for /api/ requests that no API view handles: unknown paths, a missing slash, CSRF.

Django answers these with HTML pages of its own (a 404 page, an empty
redirect, the CSRF failure page); an API client gets the documented error
shape instead, from every path under /api/.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import Resolver404, resolve, reverse
from django.views.csrf import csrf_failure as html_csrf_failure
from django.views.decorators.csrf import csrf_exempt

from queue_app.api.errors import error_body

API_PREFIX = "/api/"


@csrf_exempt  # answers 404 whatever the method; nothing here reads cookies or writes
def not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """404 in the error shape; a path missing its final slash is redirected (308 keeps a POST's body)."""
    # A path with a control character names no view, and could not go in a Location header.
    if not request.path.endswith("/") and request.path.isprintable():
        target = request.path + "/"
        if _is_api_view(target):
            query = request.META.get("QUERY_STRING", "")
            location = target + (f"?{query}" if query else "")
            response = JsonResponse(
                error_body("append_slash", f"API paths end with a slash: use {target}", location=location),
                status=308,
            )
            response["Location"] = location
            return response
    return JsonResponse(error_body("not_found", "Not found."), status=404)


def _is_api_view(path: str) -> bool:
    try:
        return resolve(path).func is not not_found
    except Resolver404:
        return False


def api_root(request: HttpRequest) -> JsonResponse:
    """GET /api/: where the resources are; no authentication (it shows no data)."""
    names = {
        "jobs": "job-list",
        "queues": "queue-list",
        "stats": "stats",
        "health": "health",
        "schema": "schema",
        "docs": "docs",
    }
    return JsonResponse({name: request.build_absolute_uri(reverse(view)) for name, view in names.items()})


def csrf_failure(request: HttpRequest, reason: str = "") -> JsonResponse:
    """settings.CSRF_FAILURE_VIEW: JSON under /api/, Django's page elsewhere (the admin)."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse(error_body("csrf_failed", f"CSRF check failed: {reason}"), status=403)
    return html_csrf_failure(request, reason)
