"""What every history list of the admin shares: no count of the whole table, no form that writes."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin import helpers
from django.utils.decorators import method_decorator
from django.utils.html import format_html
from django.utils.translation import gettext as _

from queue_app.admin.changelist import DeclaredLookupsOnly
from queue_app.admin.pagination import EstimatedCountPaginator
from queue_app.replica import reads_replica


class HistoryAdmin(DeclaredLookupsOnly, admin.ModelAdmin):
    """A list that never counts the whole table and never writes through a form.

    Shown (GET), the list reads the replica when there is one (queue_app/replica.py); its
    actions (POST) and an object's own page read the primary, which they act on.
    """

    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100

    @method_decorator(reads_replica)
    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, extra_context)

    def action_checkbox(self, obj):
        """Django's own checkbox, as the widget renders it, written out: rendering a widget
        template per row was a third of a long page's rendering time."""
        label = format_html(_("Select this object for an action - {}"), str(obj))
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            helpers.ACTION_CHECKBOX_NAME,
            str(obj.pk),
            label,
        )

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


class ReadableByJobViewers:
    """Never written through the admin, and shown to whoever may see jobs: a job's log trail,
    its workflow, its batch are part of its history."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.has_perm("queue_app.view_job") or request.user.has_perm("queue_app.change_job")
