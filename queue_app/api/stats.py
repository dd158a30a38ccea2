"""The body of /api/stats/, drawn from the engine's read model (queue_app/engine/stats.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from queue_app.engine.stats import OLDEST_QUEUED, QueueStats, queue_stats


def _seconds(stats: QueueStats, moment: datetime | None) -> float | None:
    age = stats.age(moment)
    return None if age is None else age.total_seconds()


def estimated_figures(stats: QueueStats) -> list[str]:
    """Paths of the figures that are PostgreSQL's estimates rather than counts."""
    figures = [f"jobs.by_status.{status}" for status in stats.by_status if status in stats.estimated]
    if OLDEST_QUEUED in stats.estimated:
        figures.append("oldest_queued_age_seconds")
    return figures


def collect() -> dict[str, Any]:
    stats = queue_stats()
    return {
        "generated_at": timezone.now(),
        "jobs": {"total": stats.total, "by_status": stats.by_status, "by_queue": stats.by_queue},
        "oldest_queued_age_seconds": _seconds(stats, stats.oldest_queued_at),
        "outbox": {
            "pending": stats.outbox_pending,
            "oldest_pending_age_seconds": _seconds(stats, stats.outbox_oldest),
        },
        "redis": stats.redis,
        "redis_error": stats.redis_error,
        "estimated": estimated_figures(stats),
    }
