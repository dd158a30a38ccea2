"""The admin's queue list: every configured queue, paused or not, with its limits editable.

Pause, resume and limit changes go through the services (the same as the API
and the ``queue`` command), which take the queue's lock so that every worker
honours them from their commit on. The forms refuse what the service would
(limits out of range) and leave the row of a queue no longer configured
read-only. Opening the list adds a row for any configured queue that has none yet.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from queue_app import services
from queue_app.admin.changelist import DeclaredLookupsOnly
from queue_app.conf import queue_settings
from queue_app.engine.controls import MAX_CONCURRENCY_LIMIT, MAX_RATE_LIMIT
from queue_app.models import QueueState

LIMITS = ("concurrency_limit", "rate_limit", "key_concurrency_limit", "key_rate_limit")


class QueueLimitsForm(forms.ModelForm):
    """A queue no longer configured keeps its row, but the service refuses to change it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.name not in queue_settings().QUEUES:
            for name in LIMITS:
                if name in self.fields:
                    self.fields[name].disabled = True

    def _positive_rate(self, name: str) -> float | None:
        # Above 0, strictly: a form field's min_value is inclusive, and otherwise the table's
        # check constraint refuses it, shown by its name above the form.
        rate = self.cleaned_data[name]
        if rate is not None and rate <= 0:
            raise forms.ValidationError(
                "Must be a number of jobs per second above 0 (leave it empty for no limit).", code="min_value"
            )
        return rate

    def clean_rate_limit(self) -> float | None:
        return self._positive_rate("rate_limit")

    def clean_key_rate_limit(self) -> float | None:
        return self._positive_rate("key_rate_limit")


@admin.register(QueueState)
class QueueStateAdmin(DeclaredLookupsOnly, admin.ModelAdmin):
    list_display = ("name", "mode", "state", "concurrency_limit", "rate_limit", "updated_at")
    list_editable = ("concurrency_limit", "rate_limit")
    list_filter = ("paused",)
    actions = ("pause_selected", "resume_selected")
    fields = ("name", "paused", *LIMITS, "updated_at")
    readonly_fields = ("name", "paused", "updated_at")
    form = QueueLimitsForm

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_changelist_form(self, request, **kwargs):
        return super().get_changelist_form(request, form=self.form, **kwargs)

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        # The service's bounds (above 0 for a rate: QueueLimitsForm.clean_rate_limit).
        if db_field.name in ("concurrency_limit", "key_concurrency_limit"):
            kwargs.update(min_value=1, max_value=MAX_CONCURRENCY_LIMIT)
        elif db_field.name in ("rate_limit", "key_rate_limit"):
            kwargs["max_value"] = MAX_RATE_LIMIT
        if db_field.name in LIMITS:
            # What the page showed comes back with the form, so a limit counts as changed only
            # if the operator changed it, not if someone else did since the page opened.
            kwargs["show_hidden_initial"] = True
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def changelist_view(self, request: HttpRequest, extra_context=None):
        QueueState.objects.bulk_create(
            [QueueState(name=name) for name in queue_settings().QUEUES], ignore_conflicts=True
        )
        return super().changelist_view(request, extra_context)

    @admin.display(description="mode")
    def mode(self, state: QueueState) -> str:
        fifo = queue_settings().QUEUES.get(state.name)
        return "not configured" if fifo is None else ("FIFO" if fifo else "priority")

    @admin.display(description="state")
    def state(self, state: QueueState) -> str:
        return "paused" if state.paused else "active"

    def save_model(self, request, obj: QueueState, form, change) -> None:
        # Through the service: it validates, takes the queue's lock and resets the rate bucket.
        # Only the limits edited: the other keeps its value (and a rate its bucket).
        limits = {name: getattr(obj, name) for name in LIMITS if name in form.changed_data}
        if not limits:
            return
        try:
            services.set_queue_limits(obj.name, **limits)
        except services.QueueError as error:
            # The form checks what the service does; this is a refusal the form did not foresee.
            self.message_user(request, f"{obj.name}: {error.message}", messages.ERROR)

    def _each_configured(self, request, queryset: QuerySet[QueueState], change, verb: str) -> None:
        changed = 0
        for name in queryset.values_list("name", flat=True):
            if name in queue_settings().QUEUES:
                change(name)
                changed += 1
        self.message_user(request, f"{changed} queue(s) {verb}.", messages.SUCCESS)

    @admin.action(description="Pause selected queues", permissions=["change"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[QueueState]) -> None:
        self._each_configured(request, queryset, services.pause_queue, "paused")

    @admin.action(description="Resume selected queues", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[QueueState]) -> None:
        self._each_configured(request, queryset, services.resume_queue, "resumed")
