"""Maintenance leases: which process leads each queue's maintenance, by a row with an expiry.

The conditional UPDATE in ``take_maintenance_leases`` (engine/sql/maintenance.sql)
is the election: it renews the caller's unexpired leases and takes expired ones,
so at most one caller holds a queue's lease at a time by the database clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection

from queue_app.engine import sql


def add_leases(queues: Sequence[str]) -> None:
    """Make sure each queue has its lease row (free, if new)."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("add_maintenance_leases"), {"queues": sorted(queues)})


def take_leases(queues: Sequence[str], *, holder: str, lease_seconds: float) -> set[str]:
    """Renew ``holder``'s leases among ``queues`` and take the expired ones, for
    ``lease_seconds`` from now; returns the queues ``holder`` leads now."""
    params = {"queues": sorted(queues), "holder": holder, "lease": lease_seconds}
    with connection.cursor() as cursor:
        cursor.execute(sql.query("take_maintenance_leases"), params)
        return {row[0] for row in cursor.fetchall()}


def release_leases(queues: Sequence[str], *, holder: str) -> None:
    """Give up ``holder``'s leases among ``queues``: another candidate takes them at its next try."""
    with connection.cursor() as cursor:
        cursor.execute(sql.query("release_maintenance_leases"), {"queues": sorted(queues), "holder": holder})
