"""The job list's actions: cancel and retry in set-based statements, re-enqueue one job at a time.

Each calls the same services as the API, on at most ``JobAdmin.action_limit``
jobs per request, and says how many jobs changed and how many were skipped (and
why), counted by status in one query rather than tried one by one.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Collection
from functools import partial

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from queue_app import services
from queue_app.engine.actions import CANCEL_TRANSITIONS, RETRY_TRANSITIONS
from queue_app.exceptions import JobNotFound, TransitionNotAllowed
from queue_app.models import Job
from queue_app.states import TRANSITION_TABLE, Status

# The statuses the admin's cancel and retry act on: a running job's cancel is asked, a
# cancelling job's retry waits for the confirmation (engine.actions).
CANCEL_SOURCES = frozenset().union(*(TRANSITION_TABLE[name].sources for name in CANCEL_TRANSITIONS))
RETRY_SOURCES = frozenset().union(*(TRANSITION_TABLE[name].sources for name in RETRY_TRANSITIONS))

# Where an action's message sends the operator for more jobs than one action changes.
BEYOND_ACTION_LIMIT = {
    "cancel": "cancel them through the API (POST /api/jobs/{id}/cancel/) or cancel_job()",
    "retry": "retry them through the API (POST /api/jobs/{id}/retry/) or retry_job()",
    "re-enqueue": "run manage.py reconcile_queue, which re-adds every queued job missing from Redis",
}


class JobActionsMixin:
    """For JobAdmin, which sets ``action_limit``: the jobs one action may change."""

    action_limit: int

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
