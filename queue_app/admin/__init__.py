"""The admin: the queryable history of jobs, their log trails and the outbox.

Read-mostly: no form writes job state. The actions (cancel, retry,
re-enqueue) call the same services as the API (cancel and retry in set-based
statements for the whole selection, re-enqueue one job at a time), on at most
``JobAdmin.action_limit`` jobs per request, and say how many jobs changed and
how many were skipped. Every list stays fast at a
million jobs: counts stop early (see pagination.py), filter choices come from
the handler registry and settings instead of the table, a search for an id
is an index lookup, and the date hierarchy reads only the table's first and
last dates.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from functools import partial

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from queue_app import services
from queue_app.admin import dashboard
from queue_app.admin.changelist import DeclaredLookupsOnly
from queue_app.admin.display import short_id
from queue_app.admin.job_page import JobPageMixin
from queue_app.admin.pagination import EstimatedCountPaginator
from queue_app.admin.search import job_search_filter, log_search_filter, search_words
from queue_app.admin.workflows import BatchFilter, WorkflowFilter
from queue_app.conf import queue_settings
from queue_app.engine.actions import CANCEL_TRANSITIONS, RETRY_TRANSITIONS
from queue_app.engine.workflows import dependency_ids, dependent_ids
from queue_app.exceptions import JobNotFound, TransitionNotAllowed
from queue_app.handlers import registered_types
from queue_app.models import BatchMember, Job, JobLog, OutboxMessage, WorkflowStep, task_path_expression
from queue_app.states import RUNNING, TASK_JOB_TYPE, TRANSITION_TABLE, Status
from queue_app.tasks_backend import known_task_paths

EXCERPT_LENGTH = 80
# The statuses the admin's cancel and retry act on: a running job's cancel is asked, a
# cancelling job's retry waits for the confirmation (engine.actions).
CANCEL_SOURCES = frozenset().union(*(TRANSITION_TABLE[name].sources for name in CANCEL_TRANSITIONS))
RETRY_SOURCES = frozenset().union(*(TRANSITION_TABLE[name].sources for name in RETRY_TRANSITIONS))
DASHBOARD_REFRESH_SECONDS = 10

# Where an action's message sends the operator for more jobs than one action changes.
BEYOND_ACTION_LIMIT = {
    "cancel": "cancel them through the API (POST /api/jobs/{id}/cancel/) or cancel_job()",
    "retry": "retry them through the API (POST /api/jobs/{id}/retry/) or retry_job()",
    "re-enqueue": "run manage.py reconcile_queue, which re-adds every queued job missing from Redis",
}


# --- display helpers -------------------------------------------------------------


def status_badge(status: str) -> str:
    return format_html('<span class="job-status job-status-{}">{}</span>', status, status)


def link_to_job(job_id: uuid.UUID) -> str:
    return format_html(
        '<a href="{}" title="{}"><code>{}</code></a>',
        reverse("admin:queue_app_job_change", args=[job_id]),
        job_id,
        short_id(job_id),
    )


def human_duration(delta: timedelta | None) -> str:
    if delta is None:
        return "-"
    seconds = max(delta.total_seconds(), 0)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:.0f} s"
    if seconds < 86400:
        return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"
    return f"{seconds // 86400:.0f} d {seconds % 86400 // 3600:.0f} h"


def precise_time(value: datetime | None) -> str:
    """To the millisecond: a job's steps are often less than a second apart."""
    if value is None:
        return "-"
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def timestamp_field(name: str, description: str):
    """A read-only display of the ``name`` timestamp with precise_time."""

    @admin.display(description=description)
    def display(self, obj) -> str:
        return precise_time(getattr(obj, name))

    return display


def pretty_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def excerpt(text: str, length: int = EXCERPT_LENGTH) -> str:
    first_line = text.strip().splitlines()[0] if text.strip() else ""
    if len(first_line) > length or first_line != text.strip():
        return first_line[: length - 1].rstrip() + "…"
    return first_line


# --- filters (choices never read the table) -------------------------------------------


class JobTypeFilter(admin.SimpleListFilter):
    """Choices from the handler registry: listing the types in the table would scan it."""

    title = "type"
    parameter_name = "type"

    def lookups(self, request, model_admin):
        names = registered_types()
        if self.value() and self.value() not in names:
            names = [*names, self.value()]
        return [(name, name) for name in names]

    def queryset(self, request, queryset):
        return queryset.filter(type=self.value()) if self.value() else queryset


class TaskFilter(admin.SimpleListFilter):
    """django.tasks jobs by the task's import path; choices are the tasks this process has
    loaded (the backend records each ``@task`` it validates), never a scan of the table."""

    title = "task"
    parameter_name = "task"

    def lookups(self, request, model_admin):
        paths = sorted(known_task_paths())
        if self.value() and self.value() not in paths:
            paths.append(self.value())
        return [(path, path) for path in paths]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        # No index of its own (the job table adds none for the admin): idx_jobs_type
        # narrows to task jobs, the list's created_at order and LIMIT bound the rest.
        return queryset.alias(task_path=task_path_expression()).filter(
            type=TASK_JOB_TYPE, task_path=self.value()
        )


class QueueFilter(admin.SimpleListFilter):
    """Choices from JOBQUEUE['QUEUES'], not from a DISTINCT over the table."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request, model_admin):
        names = list(queue_settings().QUEUES)
        if self.value() and self.value() not in names:
            names.append(self.value())
        return [(name, name) for name in names]

    def queryset(self, request, queryset):
        return queryset.filter(queue=self.value()) if self.value() else queryset


class OutboxStateFilter(admin.SimpleListFilter):
    """Pending vs dispatched: each side is served by its own partial index."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("pending", "pending"), ("dispatched", "dispatched")]

    def queryset(self, request, queryset):
        if self.value() == "pending":
            return queryset.filter(dispatched_at__isnull=True)
        if self.value() == "dispatched":
            return queryset.filter(dispatched_at__isnull=False)
        return queryset


# --- shared admin behaviour ------------------------------------------------------------


class HistoryAdmin(DeclaredLookupsOnly, admin.ModelAdmin):
    """A list that never counts the whole table and never writes through a form."""

    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        # Change permission guards the actions (asked without an object); a
        # single row is never saved from a form, so its page is read-only.
        return obj is None and super().has_change_permission(request)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields] + list(self.readonly_fields)


class JobLogInline(admin.TabularInline):
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

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_view_permission(self, request, obj=None) -> bool:
        # The trail is part of the job's history: whoever may see the job sees it.
        return request.user.has_perm("queue_app.view_job") or request.user.has_perm("queue_app.change_job")


# --- jobs ---------------------------------------------------------------------------------


@admin.register(Job)
class JobAdmin(JobPageMixin, HistoryAdmin):
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

    # --- actions: cancel and retry set-based, re-enqueue one job at a time ----------------

    @admin.action(description="Cancel selected jobs", permissions=["change"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        reason = f"cancelled in the admin by {request.user.get_username()}"
        change = partial(self._on_the_set, services.cancel_jobs, "cancel", reason)
        self._apply(request, queryset, change, "cancel", "Cancelled", CANCEL_SOURCES)

    @admin.action(description="Retry selected jobs (failed or cancelled)", permissions=["change"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        reason = f"retried in the admin by {request.user.get_username()}"
        change = partial(self._on_the_set, services.retry_jobs, "retry", reason)
        self._apply(request, queryset, change, "retry", "Retried", RETRY_SOURCES)

    @admin.action(description="Re-enqueue selected jobs in Redis (queued only)", permissions=["change"])
    def reenqueue_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        change = partial(self._one_by_one, services.reenqueue_job)
        self._apply(request, queryset, change, "re-enqueue", "Re-enqueued", {Status.QUEUED})

    @staticmethod
    def _on_the_set(
        service: Callable[..., services.ActionCounts], action: str, reason: str, ids: list[uuid.UUID]
    ) -> tuple[int, Counter, list[str]]:
        """All of ``ids`` through ``service`` at once, in set-based statements."""
        counts = service(ids, reason=reason)
        # Counted as eligible a moment ago: another request changed them since.
        meanwhile = f"cannot {action} a job whose status changed meanwhile"
        skipped = Counter({meanwhile: len(ids) - counts.changed})
        notes = []
        if counts.max_attempts_raised:
            notes.append(
                f"Max attempts raised for {counts.max_attempts_raised} of them: they had used every"
                " attempt, so max_attempts rose to one more than their attempts to allow this run."
                " Attempts are never reset (they number the job's attempts in its log); each job's log"
                " records its max_attempts before and after."
            )
        return counts.changed, skipped, notes

    @staticmethod
    def _one_by_one(
        service: Callable[[uuid.UUID], Job], ids: list[uuid.UUID]
    ) -> tuple[int, Counter, list[str]]:
        """Each of ``ids`` through ``service``, one transaction per job."""
        changed, skipped = 0, Counter()
        for job_id in ids:
            try:
                service(job_id)
            except (TransitionNotAllowed, JobNotFound) as exc:
                skipped[exc.message] += 1
            else:
                changed += 1
        return changed, skipped, []

    def _apply(
        self,
        request: HttpRequest,
        queryset: QuerySet[Job],
        change: Callable[[list[uuid.UUID]], tuple[int, Counter, list[str]]],
        action: str,
        verb: str,
        sources: Collection[str],
    ) -> None:
        """``change`` the selected jobs in one of the ``sources`` statuses; it returns how many
        changed, why the others were skipped, and notes about the changed ones.

        The rest are counted by status in one query, not tried one by one. More jobs than
        ``action_limit`` change none. A job whose state changed meanwhile is skipped too.
        """
        selected = dict(queryset.order_by().values_list("status").annotate(Count("pk")))
        eligible = sum(jobs for status, jobs in selected.items() if status in sources)
        if eligible > self.action_limit:
            self.message_user(
                request,
                f"Nothing {verb.lower()}: {eligible} of the selected jobs can be {verb.lower()}, more than"
                f" the {self.action_limit} one action may change. Narrow the list (status, type, queue,"
                f" dates) or {BEYOND_ACTION_LIMIT[action]}.",
                messages.ERROR,
            )
            return
        skipped = Counter(
            {
                f"cannot {action} a job that is {status}": jobs
                for status, jobs in selected.items()
                if status not in sources
            }
        )
        ids = queryset.filter(status__in=sources).order_by().values_list("id", flat=True)
        changed, also_skipped, notes = change(list(ids[: self.action_limit]))
        skipped.update(also_skipped)
        skipped = +skipped  # without reasons that skipped none
        noun = "job" if changed == 1 else "jobs"
        level = messages.SUCCESS if changed else messages.INFO
        self.message_user(request, f"{verb} {changed} {noun}.", level)
        for note in notes:
            self.message_user(request, note, messages.INFO)
        if skipped:
            reasons = "; ".join(f"{message} ({count})" for message, count in skipped.most_common())
            total = sum(skipped.values())
            self.message_user(
                request, f"Skipped {total} {'job' if total == 1 else 'jobs'}: {reasons}.", messages.WARNING
            )

    # --- the dashboard ------------------------------------------------------------------

    def get_urls(self):
        dashboard_url = path(
            "dashboard/", self.admin_site.admin_view(self.dashboard_view), name="queue_app_job_dashboard"
        )
        return [dashboard_url, *super().get_urls()]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """Staff with view permission on jobs; ``?fragment=1`` returns the part that refreshes."""
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


# --- log trail and outbox ---------------------------------------------------------------


@admin.register(JobLog)
class JobLogAdmin(HistoryAdmin):
    list_display = ("created_at", "job_link", "level_badge", "event", "message_excerpt")
    list_filter = ("level",)
    search_fields = ("message",)
    search_help_text = "Words of the message in their order, or whole job ids for those jobs' trails."
    # Newest first along the primary key: ids grow with time and need no extra index.
    ordering = ("-id",)
    # No listed column has an index to sort by.
    sortable_by = ()

    class Media:
        css = {"all": ("queue_app/admin.css",)}

    def get_search_results(self, request, queryset, search_term):
        if not search_words(search_term):
            return queryset, False
        return queryset.filter(log_search_filter(search_term)), False

    # Not named "job": a relation in list_display would join the job table.
    @admin.display(description="job")
    def job_link(self, entry: JobLog) -> str:
        return link_to_job(entry.job_id)

    @admin.display(description="level", ordering="level")
    def level_badge(self, entry: JobLog) -> str:
        return format_html('<span class="log-level log-level-{}">{}</span>', entry.level, entry.level)

    @admin.display(description="message")
    def message_excerpt(self, entry: JobLog) -> str:
        return excerpt(entry.message, 120)


@admin.register(OutboxMessage)
class OutboxMessageAdmin(HistoryAdmin):
    list_display = ("id", "job_link", "action", "queue", "state", "created_at", "age", "relay_lag")
    list_filter = (OutboxStateFilter, "action", QueueFilter)
    ordering = ("-id",)
    sortable_by = ("id",)  # the primary key: the only listed column with an index

    class Media:
        css = {"all": ("queue_app/admin.css",)}

    @admin.display(description="job")
    def job_link(self, message: OutboxMessage) -> str:
        return link_to_job(message.job_id)

    @admin.display(description="state")
    def state(self, message: OutboxMessage) -> str:
        if message.dispatched_at is not None:
            kind = "dispatched"
        elif message.dispatch_after is not None and message.dispatch_after > timezone.now():
            kind = "pushed"  # by its enqueuer, at commit; the relay checks it after the grace
        else:
            kind = "pending"
        return format_html('<span class="outbox-state outbox-state-{}">{}</span>', kind, kind)

    @admin.display(description="age")
    def age(self, message: OutboxMessage) -> str:
        return human_duration(timezone.now() - message.created_at)

    @admin.display(description="relay lag")
    def relay_lag(self, message: OutboxMessage) -> str:
        if message.dispatched_at is None:
            return "-"
        return human_duration(message.dispatched_at - message.created_at)


from queue_app.admin import queues as _queues  # noqa: E402,F401  (registers the queue list)
from queue_app.admin import schedules as _schedules  # noqa: E402,F401  (registers the schedule list)
