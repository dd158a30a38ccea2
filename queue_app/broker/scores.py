"""Sorted-set scores: one exact number per ready or waiting id."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from queue_app.states import PRIORITY_TIER

# Scores: tier * 2**50 + microseconds since EPOCH. 2**50 µs is ~35.7 years, and
# the largest score (3 * 2**50 - 1) stays below 2**53, so every score is an
# exact float64 integer: ordering is exact to the microsecond.
EPOCH = datetime(2020, 1, 1, tzinfo=UTC)
TIER_SPAN = 2**50
# The last enqueue time with an exact score of its own: 2055-09-05T05:58:26.842623Z.
# Later times would clamp (and tie), so enqueue refuses a run_at beyond it.
LATEST_EXACT_TIME = EPOCH + timedelta(microseconds=TIER_SPAN - 1)


def priority_score(tier: int, enqueued_at: datetime) -> float:
    """Exact float64 score: tier first, then enqueue time (µs), clamped to the tier."""
    delta = enqueued_at - EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    micros = min(max(micros, 0), TIER_SPAN - 1)
    return float(tier * TIER_SPAN + micros)


def ready_score(priority: str, enqueued_at: datetime) -> float:
    """The score of a ready job in its queue's priority set: its priority's tier, then its enqueue time."""
    return priority_score(PRIORITY_TIER[priority], enqueued_at)


def enqueue_order_score(enqueued_at: datetime) -> float:
    """Microseconds since EPOCH: the FIFO position of a job (tier 0 of the priority score)."""
    return priority_score(0, enqueued_at)


def due_score(due_at: datetime) -> float:
    """A waiting id's score in the retry set: when it is due, in epoch seconds."""
    return due_at.timestamp()
