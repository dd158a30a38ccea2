"""Workflows and batches in the admin: a workflow's graph drawn as server-rendered SVG (each
step coloured by its status and linked to its job), a batch's counts and callbacks, and the
job list's filters by workflow and by batch (links from those pages set them)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from queue_app.admin.changelist import DeclaredLookupsOnly
from queue_app.admin.display import short_id
from queue_app.admin.history import ReadableByJobViewers
from queue_app.admin.pagination import EstimatedCountPaginator
from queue_app.engine import batches, workflows
from queue_app.ids import parse_job_id
from queue_app.models import Batch, Workflow
from queue_app.states import Status

# Fill colours by status (text stays dark on each).
STATUS_COLOURS = {
    Status.WAITING: "#e5e7eb",
    Status.QUEUED: "#bfdbfe",
    Status.PROCESSING: "#fde68a",
    Status.CANCELLING: "#fed7aa",
    Status.COMPLETED: "#bbf7d0",
    Status.FAILED: "#fecaca",
    Status.CANCELLED: "#d1d5db",
}
NODE_WIDTH, NODE_HEIGHT, COLUMN_GAP, ROW_GAP, MARGIN = 150, 34, 60, 16, 10
# Larger graphs are listed, not drawn: a drawing of thousands of boxes helps nobody.
MAX_DRAWN_STEPS = 300


class _IdFilter(admin.SimpleListFilter):
    """Jobs of one workflow or batch, by its id in the query string (its page links here);
    no choices of its own, so the list never reads the table to offer them."""

    def lookups(self, request, model_admin):
        value = self.value()
        return [(value, short_id(value))] if value else []

    def _id(self):
        return parse_job_id(self.value())


class WorkflowFilter(_IdFilter):
    title = "workflow"
    parameter_name = "workflow"

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        workflow_id = self._id()
        return (
            queryset.none()
            if workflow_id is None
            else queryset.filter(workflow_step__workflow_id=workflow_id)
        )


class BatchFilter(_IdFilter):
    title = "batch"
    parameter_name = "batch"

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        batch_id = self._id()
        return queryset.none() if batch_id is None else queryset.filter(batch_member__batch_id=batch_id)


def _levels(steps: list[workflows.StepState]) -> dict[str, int]:
    """Each step's column: one past its deepest dependency inside the workflow."""
    by_name = {step.name: step for step in steps}
    level: dict[str, int] = {}
    for step in steps:  # submission order puts a step after what it depends on (the graph is acyclic)
        stack = [step.name]
        while stack:
            name = stack[-1]
            parents = [p for p in by_name[name].depends_on if p in by_name and p not in level]
            if parents:
                stack.extend(parents)
                continue
            stack.pop()
            level[name] = 1 + max((level[p] for p in by_name[name].depends_on if p in by_name), default=-1)
    return level


def workflow_svg(steps: list[workflows.StepState]) -> str:
    """The graph, left to right by dependency depth, as one SVG element (safe HTML)."""
    if not steps:
        return "-"
    if len(steps) > MAX_DRAWN_STEPS:
        return format_html("<p>{} steps: too many to draw; see the list below.</p>", len(steps))
    level = _levels(steps)
    rows: dict[int, int] = {}
    place: dict[str, tuple[int, int]] = {}
    for step in steps:
        column = level[step.name]
        row = rows.get(column, 0)
        rows[column] = row + 1
        place[step.name] = (
            MARGIN + column * (NODE_WIDTH + COLUMN_GAP),
            MARGIN + row * (NODE_HEIGHT + ROW_GAP),
        )
    width = MARGIN * 2 + (max(level.values()) + 1) * (NODE_WIDTH + COLUMN_GAP) - COLUMN_GAP
    height = MARGIN * 2 + max(rows.values()) * (NODE_HEIGHT + ROW_GAP) - ROW_GAP
    edges = []
    for step in steps:
        x2, y2 = place[step.name]
        for parent in step.depends_on:
            if parent in place:
                x1, y1 = place[parent]
                edges.append((x1 + NODE_WIDTH, y1 + NODE_HEIGHT // 2, x2, y2 + NODE_HEIGHT // 2))
    edge_html = format_html_join(
        "",
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#6b7280" marker-end="url(#arrow)"/>',
        edges,
    )
    node_html = format_html_join(
        "",
        '<a href="{}" class="workflow-node workflow-node-{}"><title>{} ({}): {}</title>'
        '<rect x="{}" y="{}" width="{}" height="{}" rx="4" fill="{}" stroke="#374151"/>'
        '<text x="{}" y="{}" font-size="12" text-anchor="middle" fill="#111827">{}</text></a>',
        (
            (
                reverse("admin:queue_app_job_change", args=[step.job_id]),
                step.status,
                step.name,
                step.type,
                step.status,
                place[step.name][0],
                place[step.name][1],
                NODE_WIDTH,
                NODE_HEIGHT,
                STATUS_COLOURS.get(step.status, "#ffffff"),
                place[step.name][0] + NODE_WIDTH // 2,
                place[step.name][1] + NODE_HEIGHT // 2 + 4,
                step.name if len(step.name) <= 20 else step.name[:19] + "…",
            )
            for step in steps
        ),
    )
    return format_html(
        '<svg class="workflow-graph" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}"'
        ' viewBox="0 0 {} {}" role="img" aria-label="workflow graph">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6"'
        ' markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#6b7280"/>'
        "</marker></defs>{}{}</svg>",
        width,
        height,
        width,
        height,
        edge_html,
        node_html,
    )


def _jobs_link(parameter: str, value, text: str) -> str:
    return format_html(
        '<a href="{}?{}={}">{}</a>', reverse("admin:queue_app_job_changelist"), parameter, value, text
    )


class ReadOnlyAdmin(ReadableByJobViewers, DeclaredLookupsOnly, admin.ModelAdmin):
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    ordering = ("-created_at",)
    sortable_by = ()

    class Media:
        css = {"all": ("queue_app/admin.css",)}


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "owner", "created_at")
    fields = ("id", "name", "owner", "created_at", "overall_status", "graph", "step_list", "jobs")
    readonly_fields = fields

    @admin.display(description="status")
    def overall_status(self, workflow: Workflow) -> str:
        return workflows.workflow_status(workflows.workflow_steps(workflow))

    @admin.display(description="graph")
    def graph(self, workflow: Workflow) -> str:
        return workflow_svg(workflows.workflow_steps(workflow))

    @admin.display(description="steps")
    def step_list(self, workflow: Workflow) -> str:
        rows = format_html_join(
            "",
            '<tr><td>{}</td><td><a href="{}"><code>{}</code></a></td><td>{}</td><td>{}</td><td>{}</td></tr>',
            (
                (
                    step.name,
                    reverse("admin:queue_app_job_change", args=[step.job_id]),
                    short_id(step.job_id),
                    step.type,
                    step.status,
                    ", ".join(step.depends_on) or "-",
                )
                for step in workflows.workflow_steps(workflow)
            ),
        )
        return format_html(
            "<table><thead><tr><th>step</th><th>job</th><th>type</th><th>status</th><th>waits for</th>"
            "</tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="jobs")
    def jobs(self, workflow: Workflow) -> str:
        return _jobs_link("workflow", workflow.id, "this workflow's jobs in the job list")


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "owner", "created_at")
    fields = ("id", "name", "owner", "created_at", "counts", "callbacks", "jobs")
    readonly_fields = fields

    @admin.display(description="members")
    def counts(self, batch: Batch) -> str:
        counts = batches.batch_counts(batch)
        shown = ["total", "pending", "completed", "failed", "cancelled"]
        return format_html_join(
            mark_safe("<br>"),
            '<span class="batch-count batch-count-{}">{}: {}</span>',
            ((k, k, counts[k]) for k in shown),
        )

    @admin.display(description="callbacks")
    def callbacks(self, batch: Batch) -> str:
        items = [
            (name, reverse("admin:queue_app_job_change", args=[job_id]), short_id(job_id))
            for name, job_id in (
                ("on_complete", batch.on_complete_id),
                ("on_success", batch.on_success_id),
                ("on_failure", batch.on_failure_id),
            )
            if job_id is not None
        ]
        if not items:
            return "-"
        return format_html_join(mark_safe("<br>"), '{}: <a href="{}"><code>{}</code></a>', items)

    @admin.display(description="jobs")
    def jobs(self, batch: Batch) -> str:
        return _jobs_link("batch", batch.id, "this batch's members in the job list")
