"""Who may see and act on which jobs: Django's model permissions, the admin's own rule.

Everyone sees and acts on their own jobs. Other users' jobs need
``queue_app.view_job`` to be seen (and for /api/stats/, which counts them)
and ``queue_app.change_job`` to be cancelled or retried. ``is_staff`` alone
grants nothing here, as in the admin; a superuser has every permission.
"""

from __future__ import annotations

from rest_framework.permissions import BasePermission

VIEW_ALL_JOBS = "queue_app.view_job"
CHANGE_ALL_JOBS = "queue_app.change_job"


def may_view_all_jobs(user) -> bool:
    return user.has_perm(VIEW_ALL_JOBS)


def may_change_job(user, job) -> bool:
    return job.owner_id == user.pk or user.has_perm(CHANGE_ALL_JOBS)


class CanViewAllJobs(BasePermission):
    """For endpoints about every user's jobs (statistics)."""

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated and may_view_all_jobs(request.user))
