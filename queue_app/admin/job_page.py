"""A job's page: what an operator comes for on the first screen, and Cancel / Retry on it.

The summary (status, attempts, times, the last error) and the log trail come before the
job's fields, as Sidekiq's and Oban's web UIs put them; the buttons post to the list's
own actions with this one job selected, so they ask the same permission, go through the
same services and say what happened in the same messages.
"""

from __future__ import annotations

from collections.abc import Collection

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.views.decorators.http import require_POST

from queue_app.models import Job


class JobPageMixin:
    """For JobAdmin, which sets ``page_buttons``: (name, list action, statuses it applies to)."""

    change_form_template = "admin/queue_app/job/change_form.html"
    page_buttons: tuple[tuple[str, str, Collection[str]], ...] = ()

    def get_urls(self):
        buttons = [
            path(
                f"<path:object_id>/{name}/",
                self.admin_site.admin_view(require_POST(self._button_view(action))),
                name=f"queue_app_job_{name}",
            )
            for name, action, _ in self.page_buttons
        ]
        return [*buttons, *super().get_urls()]

    def _button_view(self, action: str):
        def view(request: HttpRequest, object_id: str) -> HttpResponse:
            if not self.has_change_permission(request):
                raise PermissionDenied
            job = self.get_object(request, object_id)
            if job is None:
                raise Http404("No such job.")
            getattr(self, action)(request, Job.objects.filter(pk=job.pk))
            return HttpResponseRedirect(reverse("admin:queue_app_job_change", args=[job.pk]))

        return view

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        job = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if job is not None:
            may_change = self.has_change_permission(request)
            context["job_summary"] = self.summary(job)
            context["job_buttons"] = [
                (name.capitalize(), reverse(f"admin:queue_app_job_{name}", args=[job.pk]))
                for name, _, statuses in self.page_buttons
                if may_change and job.status in statuses
            ]
        return super().change_view(request, object_id, form_url, context)

    def changelist_view(self, request: HttpRequest, extra_context=None):
        # Django titles the list "Select job to change" whenever actions may change jobs,
        # but no row is ever edited.
        return super().changelist_view(request, {"title": "Jobs", **(extra_context or {})})

    def summary(self, job: Job) -> list[tuple[str, object]]:
        """(label, value) pairs of the first screen, in reading order."""
        return [
            ("status", self.status_badge(job)),
            ("attempts", self.attempts_of_max(job)),
            ("type", self.job_type(job)),
            ("queue", job.queue),
            ("created", self.created(job)),
            ("started", self.started(job)),
            ("finished", self.completed(job)),
            ("took", self.duration(job)),
            ("worker", job.worker_id or "-"),
        ]
