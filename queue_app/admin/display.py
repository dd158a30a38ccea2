"""How the admin shows a job id in little room."""

from __future__ import annotations

import uuid


def short_id(value: uuid.UUID | str) -> str:
    """The id's last 8 digits, random in a UUIDv7, where the first digits are the creation
    time and read the same for every job of the same minute. The search box finds a job by it."""
    return "…" + str(value)[-8:]
