"""The admin's schedule list: each periodic schedule with its last and next tick, and pause/resume.

Schedules are declared in code or settings; the rows here hold only what the
schedulers share (paused, last tick, next tick, last job). Opening the list
adds a row for any declared schedule no scheduler has seen yet.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from queue_app.admin.changelist import DeclaredLookupsOnly
from queue_app.admin.display import link_to_job
from queue_app.engine.scheduling import ensure_schedule_states, resume_schedules
from queue_app.engine.selectors import database_now
from queue_app.models import ScheduleState
from queue_app.schedules import Schedule, ScheduleError, all_schedules


def declared_schedules() -> dict[str, Schedule]:
    try:
        return {schedule.name: schedule for schedule in all_schedules()}
    except ScheduleError:
        # The system check reports it; the list still shows the rows.
        return {}


@admin.register(ScheduleState)
class ScheduleStateAdmin(DeclaredLookupsOnly, admin.ModelAdmin):
    list_display = (
        "name",
        "job_type",
        "cron",
        "time_zone",
        "state",
        "last_tick_at",
        "last_job_link",
        "next_tick_at",
    )
    list_filter = ("paused",)
    search_fields = ("name",)
    actions = ("pause_selected", "resume_selected")

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        # Change permission guards pause and resume (asked without a row); no form saves a row:
        # a definition edited by hand would make the schedulers take the schedule as redefined.
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request, obj=None) -> bool:
        # The list would add the row again, unpaused, for a schedule still declared.
        return False

    def changelist_view(self, request: HttpRequest, extra_context=None):
        self._declared = declared_schedules()
        ensure_schedule_states(list(self._declared.values()), now=timezone.now())
        return super().changelist_view(request, extra_context)

    def _schedule(self, state: ScheduleState) -> Schedule | None:
        return getattr(self, "_declared", {}).get(state.name)

    @admin.display(description="type")
    def job_type(self, state: ScheduleState) -> str:
        schedule = self._schedule(state)
        return schedule.type if schedule else "-"

    @admin.display(description="schedule")
    def cron(self, state: ScheduleState) -> str:
        schedule = self._schedule(state)
        return format_html("<code>{}</code>", schedule.cron) if schedule else "no longer declared"

    @admin.display(description="time zone")
    def time_zone(self, state: ScheduleState) -> str:
        schedule = self._schedule(state)
        return schedule.timezone if schedule else "-"

    @admin.display(description="state")
    def state(self, state: ScheduleState) -> str:
        return "paused" if state.paused else "active"

    @admin.display(description="last job")
    def last_job_link(self, state: ScheduleState) -> str:
        return link_to_job(state.last_job_id) if state.last_job_id else "-"

    @admin.action(description="Pause selected schedules", permissions=["change"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[ScheduleState]) -> None:
        changed = queryset.filter(paused=False).update(paused=True)
        self.message_user(request, f"{changed} schedule(s) paused.", messages.SUCCESS)

    @admin.action(description="Resume selected schedules", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[ScheduleState]) -> None:
        changed = resume_schedules(queryset, declared_schedules(), now=database_now())
        self.message_user(request, f"{changed} schedule(s) resumed.", messages.SUCCESS)
