"""The queue's settings: typed defaults, overridable in ``settings.JOBQUEUE``.

Values may arrive as strings from the environment (``JOBQUEUE_<KEY>``); they
are coerced here. ``queue_settings()`` re-reads under ``override_settings``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver


@dataclass(frozen=True)
class QueueSettings:
    # name -> strict FIFO? e.g. "default,bulk:fifo" from the environment
    QUEUES: dict[str, bool]
    LEASE_SECONDS: float = 60.0
    HEARTBEAT_SECONDS: float = 10.0
    DEFAULT_MAX_ATTEMPTS: int = 3
    DEFAULT_TIME_LIMIT_SECONDS: float = 300.0
    HARD_TIME_LIMIT_GRACE_SECONDS: float = 5.0
    RETRY_BACKOFF_BASE_SECONDS: float = 2.0
    RETRY_BACKOFF_MAX_SECONDS: float = 3600.0
    SHUTDOWN_GRACE_SECONDS: float = 20.0
    RECONCILE_GRACE_SECONDS: float = 30.0
    RECONCILE_BATCH_SIZE: int = 5000
    OUTBOX_RETENTION_SECONDS: float = 7 * 24 * 3600.0
    RELAY_BATCH_SIZE: int = 500
    RELAY_POLL_SECONDS: float = 2.0
    WORKER_BATCH_SIZE: int = 20
    WORKER_POLL_SECONDS: float = 1.0
    WORKER_CLAIM_AHEAD_SECONDS: float = 0.05
    WORKER_RELEASE_AFTER_SECONDS: float = 0.5
    MAX_PAYLOAD_BYTES: int = 256 * 1024
    MAX_PAYLOAD_DEPTH: int = 32


DEFAULT_QUEUES = {"default": False}
_POSITIVE_KEYS = {f.name for f in fields(QueueSettings) if f.name != "QUEUES"}


class SettingError(ValueError):
    """A JOBQUEUE value is invalid; the message names the key."""


def parse_queues(value: Any) -> dict[str, bool]:
    """Accept {"name": {"fifo": bool}}, {"name": bool}, or "a,b:fifo"."""
    if isinstance(value, str):
        queues = {}
        for item in filter(None, (part.strip() for part in value.split(","))):
            name, _, mode = item.partition(":")
            if mode not in ("", "fifo", "priority"):
                raise SettingError(f"JOBQUEUE['QUEUES']: unknown mode {mode!r} for {name!r}")
            queues[name.strip()] = mode == "fifo"
        value = queues
    if not isinstance(value, dict) or not value:
        raise SettingError("JOBQUEUE['QUEUES'] must name at least one queue")
    parsed = {}
    for name, options in value.items():
        if not isinstance(name, str) or not name or not name.replace("-", "").replace("_", "").isalnum():
            raise SettingError(f"JOBQUEUE['QUEUES']: invalid queue name {name!r} (letters, digits, - and _)")
        parsed[name] = bool(options.get("fifo", False)) if isinstance(options, dict) else bool(options)
    return parsed


def build(raw: dict[str, Any]) -> QueueSettings:
    """Coerce and validate raw values; raises SettingError naming the key."""
    unknown = set(raw) - {f.name for f in fields(QueueSettings)}
    if unknown:
        raise SettingError(f"JOBQUEUE: unknown key(s) {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {"QUEUES": parse_queues(raw.get("QUEUES", DEFAULT_QUEUES))}
    for field in fields(QueueSettings):
        if field.name == "QUEUES" or field.name not in raw:
            continue
        kind = int if field.type in ("int", int) else float
        try:
            number = kind(raw[field.name])
        except (TypeError, ValueError):
            raise SettingError(
                f"JOBQUEUE['{field.name}'] must be a number, not {raw[field.name]!r}"
            ) from None
        if number <= 0:
            raise SettingError(f"JOBQUEUE['{field.name}'] must be greater than 0, not {number}")
        values[field.name] = number
    result = QueueSettings(**values)
    if result.HEARTBEAT_SECONDS >= result.LEASE_SECONDS:
        raise SettingError("JOBQUEUE['HEARTBEAT_SECONDS'] must be shorter than LEASE_SECONDS")
    return result


@cache
def queue_settings() -> QueueSettings:
    return build(getattr(settings, "JOBQUEUE", {}))


@receiver(setting_changed)
def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "JOBQUEUE":
        queue_settings.cache_clear()
