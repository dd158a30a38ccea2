"""The project's admin site: Django's, with every registered admin guarded against hostile input.

Each ModelAdmin registered on it, the project's and those other apps register
(django.contrib.auth's users and groups, DRF's tokens), gets ``QueryGuard``:
a query string PostgreSQL cannot take is Django's ``?e=1`` redirect, never a
500. A NUL byte in any argument of an admin URL (an object's id in its change,
history or delete page, or in the site's "view on site" redirect) is a 404:
PostgreSQL text cannot hold one, so it names nothing. It is ``admin.site`` through
jobsite/apps.py's GuardedAdminConfig, installed in place of ``django.contrib.admin``.
"""

from __future__ import annotations

from functools import wraps

from django.contrib import admin
from django.http import Http404


class GuardedAdminSite(admin.AdminSite):
    def register(self, model_or_iterable, admin_class=None, **options):
        # Imported here: importing queue_app.admin registers its admins on this site, which
        # must exist by then. The first register() call comes from that import, so this
        # import only finds the module already loaded.
        from queue_app.admin.changelist import QueryGuard

        admin_class = admin_class or admin.ModelAdmin
        if not issubclass(admin_class, QueryGuard):
            admin_class = type(
                admin_class.__name__, (QueryGuard, admin_class), {"__module__": admin_class.__module__}
            )
        super().register(model_or_iterable, admin_class, **options)

    def admin_view(self, view, cacheable=False):
        guarded = super().admin_view(view, cacheable)

        @wraps(guarded)
        def refusing_nul(request, *args, **kwargs):
            if any("\x00" in str(value) for value in (*args, *kwargs.values())):
                raise Http404("No admin page has a NUL byte in its address.")
            return guarded(request, *args, **kwargs)

        return refusing_nul
