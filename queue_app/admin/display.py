"""How the admin shows a job: its id in little room, its status, times, durations, JSON and errors."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from queue_app.ids import ID_TAIL_DIGITS

EXCERPT_LENGTH = 80


def short_id(value: uuid.UUID | str) -> str:
    """The id's last 8 digits, random in a UUIDv7, where the first digits are the creation
    time and read the same for every job of the same minute. The search box finds a job by it."""
    return "…" + str(value)[-ID_TAIL_DIGITS:]


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
