"""The admin's list filters: their choices come from the registry and settings, never the table."""

from __future__ import annotations

from django.contrib import admin

from queue_app.conf import queue_settings
from queue_app.handlers import registered_types
from queue_app.models import task_path_expression
from queue_app.states import TASK_JOB_TYPE
from queue_app.tasks_backend import known_task_paths


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
