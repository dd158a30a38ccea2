"""Sorted-set scores and members: where each ready or waiting id sits, exactly.

A queue's ready set orders by (priority desc, enqueue time asc), exactly and
FIFO within one priority value: the score is ``-priority`` (a small integer,
exact in float64), and Redis orders equal scores by member bytes, so each
member starts with the enqueue time: ``"<µs since EPOCH, 16 digits>:<job id>"``.
Zero-padded decimal digits sort as the numbers they spell.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(2020, 1, 1, tzinfo=UTC)
# Enqueue times are exact up to 2**53 - 1 µs after EPOCH: the FIFO order score
# (µs as a float64, used to restore lists in order) is exact below 2**53, and 16
# digits hold it in a member. That is 2305-06-05T23:47:34.740991Z; a later time
# would clamp (and tie), so enqueue refuses a run_at beyond it.
_LAST_MICROS = 2**53 - 1
LATEST_EXACT_TIME = EPOCH + timedelta(microseconds=_LAST_MICROS)
_TIME_DIGITS = 16


def _micros(at: datetime) -> int:
    """Microseconds since EPOCH, clamped to the exact range."""
    delta = at - EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return min(max(micros, 0), _LAST_MICROS)


def ready_score(priority_value: int) -> float:
    """A ready id's score: ZPOPMIN takes the highest priority first."""
    return float(-priority_value)


def ready_member(job_id, enqueued_at: datetime) -> str:
    """A ready id's member: its enqueue time orders it among equal priorities (FIFO)."""
    return f"{_micros(enqueued_at):0{_TIME_DIGITS}d}:{job_id}"


def member_job_id(member: str) -> str:
    """The job id in a ready member (a bare id, as in other structures, is its own)."""
    return member.rpartition(":")[2]


def enqueue_order_score(enqueued_at: datetime) -> float:
    """Microseconds since EPOCH, exact: the FIFO position of a job in a list."""
    return float(_micros(enqueued_at))


def due_score(due_at: datetime) -> float:
    """A waiting id's score in the retry set: when it is due, in epoch seconds."""
    return due_at.timestamp()
