"""The outbox: each intent to change Redis, whether the relay has sent it, and how long it took."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html

from queue_app.admin.display import human_duration, link_to_job
from queue_app.admin.filters import OutboxStateFilter, QueueFilter
from queue_app.admin.history import HistoryAdmin
from queue_app.models import OutboxMessage


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
