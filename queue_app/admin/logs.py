"""The log trail of every job, newest first: searchable by its message's words or by job ids."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from queue_app.admin.display import excerpt, link_to_job
from queue_app.admin.history import HistoryAdmin
from queue_app.admin.search import log_search_filter, search_words
from queue_app.models import JobLog


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
