"""The queue's settings: typed defaults, overridable in ``settings.JOBQUEUE``.

Values may arrive as strings from the environment (``JOBQUEUE_<KEY>``); they
are coerced here. ``queue_settings()`` re-reads under ``override_settings``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string


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
    # How often each queue's maintenance leader rescues jobs whose lease expired (their
    # worker died): such a job is requeued (or failed) at most this long after its lease
    # ran out, without waiting for a reconcile pass.
    LEASE_RESCUE_SECONDS: float = 5.0
    RECONCILE_GRACE_SECONDS: float = 30.0
    RECONCILE_BATCH_SIZE: int = 5000
    OUTBOX_RETENTION_SECONDS: float = 7 * 24 * 3600.0
    RELAY_BATCH_SIZE: int = 500
    RELAY_POLL_SECONDS: float = 2.0
    # A process that enqueues a ready job on a priority queue pushes it to Redis right
    # after its commit, and the relay only checks the row RELAY_GRACE_SECONDS later: no
    # relay hop on the way to a worker. Off: every job goes through the relay.
    DISPATCH_ON_COMMIT: bool = True
    RELAY_GRACE_SECONDS: float = 2.0
    # How long a relay's claim on a batch of outbox rows holds: other relays pass over the
    # rows meanwhile, and send them if the relay died before marking them. Longer than a
    # push can take (Redis commands time out after 30 s), or a slow push is sent twice.
    RELAY_CLAIM_SECONDS: float = 45.0
    WORKER_BATCH_SIZE: int = 20
    WORKER_POLL_SECONDS: float = 1.0
    WORKER_CLAIM_AHEAD_SECONDS: float = 0.05
    WORKER_RELEASE_AFTER_SECONDS: float = 0.5
    # Jobs of async or io_bound handlers one worker process runs at once (1: one job at a time).
    WORKER_SLOTS: int = 1
    MAX_PAYLOAD_BYTES: int = 256 * 1024
    # How often one job may snooze (raise Snooze) in all; the snooze past it fails the job.
    MAX_SNOOZES: int = 100
    # A running job's progress reports are written at most this often per attempt (the
    # latest one is kept and written later, at the latest when the handler returns).
    PROGRESS_MIN_INTERVAL_SECONDS: float = 0.5
    # A running job's log lines (current_job().log) written per attempt and second; the
    # rest are dropped and counted in one row.
    JOB_LOG_LINES_PER_SECOND: int = 10
    MAX_PAYLOAD_DEPTH: int = 32
    # The most jobs one workflow, batch or dependent enqueue call may hold (steps and
    # callbacks); a larger graph is refused before anything is written.
    WORKFLOW_MAX_STEPS: int = 10_000
    # Periodic jobs: name -> {"type", "cron", ...}, or that mapping as JSON from the
    # environment; parsed and checked by queue_app.schedules.
    SCHEDULES: Any = field(default_factory=dict)
    # The longest a scheduler sleeps between looks at the schedules (pause, resume).
    SCHEDULER_POLL_SECONDS: float = 5.0
    # Prometheus counters and histograms (queue_app/observability/metrics.py).
    METRICS_ENABLED: bool = True
    # A bearer token that may read /metrics without a login; empty: logged-in users only.
    METRICS_TOKEN: str = ""
    # OpenTelemetry spans and trace links (queue_app/observability/tracing.py); needs opentelemetry-api.
    TRACING_ENABLED: bool = False
    # Put in front of every Redis key the queue writes ("jobs:" gives jobs:queue:{default}:priority),
    # so several projects, or several deployments of one, can share a Redis database.
    REDIS_KEY_PREFIX: str = ""


DEFAULT_QUEUES = {"default": False}
# The longest any *_SECONDS setting or command interval may be (ten years): far past any
# sensible value, and well inside what sleeps, select() and PostgreSQL intervals accept.
MAX_SECONDS = 10 * 365 * 24 * 3600
_NON_NUMERIC_KEYS = {"QUEUES", "SCHEDULES", "METRICS_TOKEN", "REDIS_KEY_PREFIX"}
_BOOLEAN_KEYS = {"METRICS_ENABLED", "TRACING_ENABLED", "DISPATCH_ON_COMMIT"}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


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


def parse_bool(key: str, value: Any) -> bool:
    """A bool, or its spelling from the environment (1/0, true/false, yes/no, on/off)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise SettingError(f"JOBQUEUE['{key}'] must be a boolean (1/0, true/false), not {value!r}")


def parse_key_prefix(value: Any) -> str:
    """A string with no braces: a brace in it would become the keys' hash tag in a Redis
    Cluster, and every queue would share one slot instead of the queue name choosing it."""
    if not isinstance(value, str):
        raise SettingError(f"JOBQUEUE['REDIS_KEY_PREFIX'] must be a string, not {value!r}")
    if "{" in value or "}" in value:
        raise SettingError(
            f"JOBQUEUE['REDIS_KEY_PREFIX'] must not contain {{ or }} (the hash tag is the queue"
            f" name's), not {value!r}"
        )
    if any(not character.isprintable() or character.isspace() for character in value):
        raise SettingError(
            f"JOBQUEUE['REDIS_KEY_PREFIX'] must not contain spaces or control characters, not {value!r}"
        )
    return value


def build(raw: dict[str, Any]) -> QueueSettings:
    """Coerce and validate raw values; raises SettingError naming the key."""
    unknown = set(raw) - {f.name for f in fields(QueueSettings)}
    if unknown:
        raise SettingError(f"JOBQUEUE: unknown key(s) {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {
        "QUEUES": parse_queues(raw.get("QUEUES", DEFAULT_QUEUES)),
        "SCHEDULES": raw.get("SCHEDULES", {}),
    }
    token = raw.get("METRICS_TOKEN", "")
    if not isinstance(token, str):
        raise SettingError("JOBQUEUE['METRICS_TOKEN'] must be a string")
    values["METRICS_TOKEN"] = token
    values["REDIS_KEY_PREFIX"] = parse_key_prefix(raw.get("REDIS_KEY_PREFIX", ""))
    for setting in fields(QueueSettings):
        if setting.name not in raw or setting.name in _NON_NUMERIC_KEYS:
            continue
        if setting.name in _BOOLEAN_KEYS:
            # Empty keeps the default, as for the settings' own switches (_env_bool): an empty
            # JOBQUEUE_METRICS_ENABLED= must not turn a default-on feature off.
            if raw[setting.name] != "":
                values[setting.name] = parse_bool(setting.name, raw[setting.name])
            continue
        key, value = setting.name, raw[setting.name]
        kind = int if setting.type in ("int", int) else float
        try:
            # int(2.5) is 2: a fraction given for a whole number is refused, not cut.
            if kind is int and isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            number = kind(value)
        except (TypeError, ValueError, OverflowError):
            what = "a whole number" if kind is int else "a number"
            raise SettingError(f"JOBQUEUE['{key}'] must be {what}, not {value!r}") from None
        # NaN passes a `<= 0` check and infinity overflows sleeps: both are refused here.
        if kind is float and not math.isfinite(number):
            raise SettingError(f"JOBQUEUE['{key}'] must be a finite number, not {value!r}")
        if number <= 0:
            raise SettingError(f"JOBQUEUE['{key}'] must be greater than 0, not {number}")
        if kind is float and number > MAX_SECONDS:
            raise SettingError(f"JOBQUEUE['{key}'] must be at most {MAX_SECONDS} (ten years), not {value!r}")
        values[key] = number
    result = QueueSettings(**values)
    if result.HEARTBEAT_SECONDS >= result.LEASE_SECONDS:
        raise SettingError("JOBQUEUE['HEARTBEAT_SECONDS'] must be shorter than LEASE_SECONDS")
    return result


DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_url() -> str:
    """``settings.REDIS_URL``, else the ``REDIS_URL`` environment variable, else a local Redis."""
    return getattr(settings, "REDIS_URL", None) or os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL


@cache
def queue_settings() -> QueueSettings:
    return build(getattr(settings, "JOBQUEUE", {}))


@receiver(setting_changed)
def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "JOBQUEUE":
        queue_settings.cache_clear()


# Settings the app reads beside JOBQUEUE, at the top level of the project's settings, with
# the value a project that does not set them gets. Nothing else in queue_app reads a
# project setting without a default here.
PROJECT_SETTING_DEFAULTS: dict[str, Any] = {
    # Failed logins and failed token checks allowed per client, in DRF's rate form; "" = no limit.
    "AUTH_FAILURE_RATE": "20/hour",
    # Times the API reruns an enqueue after a deadlock or serialization failure.
    "API_TRANSACTION_RETRIES": 3,
    # The web server of runweb / runsystem (queue_app/runtime/gunicorn_conf.py).
    "WEB_WORKERS": 2,
    "WEB_THREADS": 4,
    "WEB_TIMEOUT": 30,
    "WEB_KEEPALIVE": 5,
    "WEB_GRACEFUL_TIMEOUT": 30,
    # The dotted path of a callable the relay and the worker call with the name of each fault
    # point they pass; "" = none. Only the test settings name one (tests/fault_points.py).
    "FAULT_POINT_HANDLER": "",
    # The database is reached through PgBouncer in transaction mode: a LISTEN or a
    # session-level lock would stay behind on a pooled server connection, so the relay
    # and the cancel listener do not LISTEN, and the worker name's lock is a
    # transaction-level one, in a transaction its connection keeps open.
    "DATABASE_PGBOUNCER": False,
}


def project_setting(name: str) -> Any:
    """The project's value of a top-level setting the app reads, else the app's default."""
    if name == "DEMO_JOB_TYPES":
        # demo.echo / demo.sleep / demo.fail: for trying the system, on with DEBUG by default.
        return getattr(settings, name, settings.DEBUG)
    return getattr(settings, name, PROJECT_SETTING_DEFAULTS[name])


def fault_point_handler() -> Callable[[str], None] | None:
    """The handler the test settings install for named fault points; None in production, where
    a fault point costs a check of None and the handler's module is not even in the wheel."""
    path = project_setting("FAULT_POINT_HANDLER")
    return import_string(path) if path else None


_RATE_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def auth_failure_limit() -> tuple[int, int] | None:
    """AUTH_FAILURE_RATE as (failures allowed, window seconds); None when the limit is off."""
    rate = project_setting("AUTH_FAILURE_RATE")
    if not rate:
        return None
    count, _, period = rate.partition("/") if isinstance(rate, str) else ("", "", "")
    if not (count.isascii() and count.isdigit() and int(count) > 0) or period[:1] not in _RATE_PERIODS:
        raise SettingError(
            f"AUTH_FAILURE_RATE must look like 20/hour (count/second|minute|hour|day), not {rate!r}"
        )
    return int(count), _RATE_PERIODS[period[0]]
