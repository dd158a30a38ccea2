"""The project's app configurations."""

from django.contrib.admin.apps import AdminConfig


class GuardedAdminConfig(AdminConfig):
    """django.contrib.admin, with jobsite/admin_site.py's GuardedAdminSite as ``admin.site``."""

    default_site = "jobsite.admin_site.GuardedAdminSite"
