"""The job list and a job's page: the queryable history of jobs, with their log trails.

Read-mostly: no form writes job state; the actions (job_actions.py) and the
page's buttons (job_page.py) go through the services. The list stays fast at a
million jobs: counts stop early (pagination.py), filter choices come from the
handler registry and settings instead of the table (filters.py), a search for
an id is an index lookup (search.py), and the date hierarchy reads only the
table's first and last dates. The queue dashboard is one of its views.
"""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from queue_app.admin import dashboard
from queue_app.admin.display import (
    excerpt,
    human_duration,
    link_to_job,
    precise_time,
    pretty_json,
    short_id,
    status_badge,
    timestamp_field,
)
from queue_app.admin.filters import JobTypeFilter, QueueFilter, TaskFilter
from queue_app.admin.history import HistoryAdmin, ReadableByJobViewers
from queue_app.admin.job_actions import CANCEL_SOURCES, RETRY_SOURCES, JobActionsMixin
from queue_app.admin.job_page import JobPageMixin
from queue_app.admin.search import job_search_filter, search_words
from queue_app.admin.workflows import BatchFilter, WorkflowFilter
from queue_app.engine.workflows import dependency_ids, dependent_ids
from queue_app.models import BatchMember, Job, JobLog, WorkflowStep, task_path_expression
from queue_app.replica import reads_replica
from queue_app.states import RUNNING

DASHBOARD_REFRESH_SECONDS = 10


class JobLogInline(ReadableByJobViewers, admin.TabularInline):
    """The job's trail, oldest first, read-only."""

    model = JobLog
    fields = ("logged_at", "level", "event", "message", "extra")
    readonly_fields = fields
    logged_at = timestamp_field("created_at", "time")
    ordering = ("created_at", "id")
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = False
    verbose_name = "log entry"
    verbose_name_plural = "log trail"


@admin.register(Job)
class JobAdmin(JobPageMixin, JobActionsMixin, HistoryAdmin):
    list_display = (
        "short_id",
        "job_type",
        "queue",
        "status_badge",
        "priority",
        "attempts_of_max",
        "created_short",
        "duration",
        "error_excerpt",
    )
    list_display_links = ("short_id",)
    # Only columns an index can order: sorting a million rows by anything else is a full sort.
    sortable_by = ("short_id", "job_type", "status_badge", "created_short")
    # Jobs one action may change: each is its own transaction, so a few thousand take seconds.
    action_limit = 1_000
    list_filter = (
        "status",
        JobTypeFilter,
        TaskFilter,
        QueueFilter,
        "priority",
        ("created_at", admin.DateFieldListFilter),
        WorkflowFilter,
        BatchFilter,
    )
    # Matched by job_search_filter (not Django's icontains on each field).
    search_fields = ("id", "type", "idempotency_key", "unique_key", "last_error")
    search_help_text = (
        "Whole job ids (spaces or commas between), 8+ characters of one (the short id shown here),"
        " an idempotency key or a unique key, a job type, or words of the last error in their order."
    )
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    inlines = (JobLogInline,)
    actions = ("cancel_selected", "retry_selected", "reenqueue_selected")
    page_buttons = (("cancel", "cancel_selected", CANCEL_SOURCES), ("retry", "retry_selected", RETRY_SOURCES))
    readonly_fields = (
        "status_badge",
        "attempts_of_max",
        "duration",
        "payload_json",
        "result_json",
        "error_text",
        "created",
        "ready_at",
        "retry_at",
        "started",
        "completed",
        "lease_expires",
        "expires",
        "relations",
        "progress_bar",
        "progress_reported",
    )
    fieldsets = (
        (None, {"fields": ("id", "type", "queue", "priority", "status_badge", "owner")}),
        ("Attempts", {"fields": ("attempts_of_max", "snoozes", "worker_id", "lease_expires")}),
        ("Progress", {"fields": ("progress_bar", "progress_message", "progress_reported")}),
        (
            "Timing",
            {"fields": ("created", "ready_at", "retry_at", "expires", "started", "completed", "duration")},
        ),
        (
            "Data",
            {
                "fields": (
                    "payload_json",
                    "result_json",
                    "error_text",
                    "idempotency_key",
                    "unique_key",
                    "concurrency_key",
                )
            },
        ),
        ("Workflow", {"fields": ("relations",)}),
    )

    created = timestamp_field("created_at", "created at")
    ready_at = timestamp_field("enqueued_at", "ready since (orders it within its priority)")
    retry_at = timestamp_field("next_retry_at", "waits until")
    started = timestamp_field("started_at", "last attempt started at")
    completed = timestamp_field("completed_at", "finished at")
    lease_expires = timestamp_field("lease_expires_at", "lease expires at")
    expires = timestamp_field("expires_at", "expires unless started by")
    progress_reported = timestamp_field("progress_at", "progress reported at")

    class Media:
        css = {"all": ("queue_app/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        # Payloads and results may be large; the list never shows them.
        jobs = (
            super()
            .get_queryset(request)
            .defer("payload", "result", "idempotency_fingerprint", "last_error_traceback")
        )
        # Only the task path leaves the payload, for the type column of django.tasks jobs.
        return jobs.annotate(task_path=task_path_expression())

    @admin.display(description="type", ordering="type")
    def job_type(self, job: Job) -> str:
        """A django.tasks job shows its task's import path: 'django.task' alone says little."""
        return getattr(job, "task_path", None) or job.type

    def get_search_results(self, request, queryset, search_term):
        if not search_words(search_term):
            return queryset, False
        return queryset.filter(job_search_filter(search_term)), False

    @admin.display(description="id", ordering="id")
    def short_id(self, job: Job) -> str:
        return format_html('<code title="{}">{}</code>', job.id, short_id(job.id))

    @admin.display(description="status", ordering="status")
    def status_badge(self, job: Job) -> str:
        return status_badge(job.status)

    @admin.display(description="created", ordering="created_at")
    def created_short(self, job: Job) -> str:
        """Compact, so the last-error column fits beside the sidebars; the exact time in its title."""
        local = timezone.localtime(job.created_at)
        return format_html(
            '<span title="{}">{}</span>', precise_time(job.created_at), local.strftime("%m-%d %H:%M:%S")
        )

    @admin.display(description="attempts")
    def attempts_of_max(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="progress")
    def progress_bar(self, job: Job) -> str:
        """The latest progress its running attempt reported (its log lines are in the trail)."""
        if job.progress is None:
            return "-"
        percent = f"{job.progress * 100:.0f} %"
        return format_html('<progress max="1" value="{}">{}</progress> {}', job.progress, percent, percent)

    @admin.display(description="took")
    def duration(self, job: Job) -> str:
        """Of the last attempt: finished, or still running; a job queued again has none yet."""
        if job.started_at is None:
            return "-"
        if job.status in RUNNING:
            return human_duration(timezone.now() - job.started_at) + " so far"
        if job.completed_at is None:
            return "-"
        return human_duration(job.completed_at - job.started_at)

    @admin.display(description="error")
    def error_excerpt(self, job: Job) -> str:
        if not job.last_error:
            return ""
        return format_html('<span title="{}">{}</span>', job.last_error[:2000], excerpt(job.last_error))

    @admin.display(description="payload")
    def payload_json(self, job: Job) -> str:
        return format_html("<pre>{}</pre>", pretty_json(job.payload))

    @admin.display(description="result")
    def result_json(self, job: Job) -> str:
        return format_html("<pre>{}</pre>", pretty_json(job.result)) if job.result is not None else "-"

    @admin.display(description="workflow, dependencies and dependents")
    def relations(self, job: Job) -> str:
        """Its workflow or batch, the jobs it waits for and the jobs that wait for it."""
        step = WorkflowStep.objects.filter(job_id=job.id).select_related("workflow").first()
        member = BatchMember.objects.filter(job_id=job.id).first()
        parents, children = dependency_ids(job.id), dependent_ids(job.id)
        if step is None and member is None and not parents and not children:
            return "-"
        lines = []
        if step is not None:
            url = reverse("admin:queue_app_workflow_change", args=[step.workflow_id])
            lines.append(
                format_html('step <b>{}</b> of workflow <a href="{}">{}</a>', step.name, url, step.workflow)
            )
        if member is not None:
            url = reverse("admin:queue_app_batch_change", args=[member.batch_id])
            lines.append(format_html('member of batch <a href="{}">{}</a>', url, short_id(member.batch_id)))
        for label, ids in (("waits for", parents), ("waited for by", children)):
            if ids:
                links = format_html_join(", ", "{}", ((link_to_job(job_id),) for job_id in ids[:50]))
                more = f" and {len(ids) - 50} more" if len(ids) > 50 else ""
                lines.append(format_html("{}: {}{}", label, links, more))
        return format_html_join(mark_safe("<br>"), "{}", ((line,) for line in lines))

    @admin.display(description="last error")
    def error_text(self, job: Job) -> str:
        if not job.last_error:
            return "-"
        if not job.last_error_traceback:
            return format_html('<pre class="job-error">{}</pre>', job.last_error)
        return format_html(
            '<pre class="job-error">{}</pre><details class="job-traceback"><summary>Traceback</summary>'
            '<pre class="job-error">{}</pre></details>',
            job.last_error,
            job.last_error_traceback,
        )

    # --- the dashboard ------------------------------------------------------------------

    def get_urls(self):
        dashboard_url = path(
            "dashboard/", self.admin_site.admin_view(self.dashboard_view), name="queue_app_job_dashboard"
        )
        return [dashboard_url, *super().get_urls()]

    @method_decorator(reads_replica)
    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """Staff with view permission on jobs; ``?fragment=1`` returns the part that refreshes.
        A read-only snapshot, so it reads the replica when there is one."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        snap = dashboard.snapshot()
        context = {
            "snapshot": snap,
            "status_chart": dashboard.status_chart(snap),
            "depth_chart": dashboard.depth_chart(snap),
            "throughput_chart": dashboard.throughput_chart(snap),
            "refresh_seconds": DASHBOARD_REFRESH_SECONDS,
            "changelist_url": reverse("admin:queue_app_job_changelist"),
        }
        if request.GET.get("fragment"):
            return TemplateResponse(request, "admin/queue_app/dashboard_body.html", context)
        context.update(
            self.admin_site.each_context(request),
            title="Queue dashboard",
            opts=self.opts,
            app_label=self.opts.app_label,
        )
        return TemplateResponse(request, "admin/queue_app/dashboard.html", context)
