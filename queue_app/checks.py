"""Start-up checks: a bad JOBQUEUE value stops every command with its key named, and so
does a cache in the queue's Redis database."""

from django.conf import settings as django_settings
from django.core import checks

from queue_app import conf
from queue_app.redis_databases import is_cluster_url, shared_database


@checks.register()
def check_jobqueue_settings(app_configs, **kwargs):
    conf.queue_settings.cache_clear()
    try:
        conf.queue_settings()
    except conf.SettingError as exc:
        return [checks.Error(str(exc), id="queue_app.E001")]
    return []


@checks.register()
def check_schedules(app_configs, **kwargs):
    """Every schedule parses, names a registered handler and a configured queue, and has a valid payload."""
    from queue_app.exceptions import QueueError
    from queue_app.handlers import registered_types
    from queue_app.payloads import checked_json_text
    from queue_app.schedules import ScheduleError, all_schedules

    try:
        settings = conf.queue_settings()
        queues = settings.QUEUES
    except conf.SettingError:
        return []  # queue_app.E001 names the bad key; schedules are checked once it is fixed
    try:
        schedules = all_schedules()
    except ScheduleError as exc:
        return [checks.Error(str(exc), id="queue_app.E002")]
    errors = []
    handlers = set(registered_types())
    for schedule in schedules:
        if schedule.type not in handlers:
            errors.append(
                checks.Error(
                    f"schedule {schedule.name!r}: 'type' {schedule.type!r} is not a registered job handler",
                    hint="Register it with @job_handler in a jobs.py module of an installed app.",
                    id="queue_app.E003",
                )
            )
        if schedule.queue not in queues:
            errors.append(
                checks.Error(
                    f"schedule {schedule.name!r}: 'queue' {schedule.queue!r} is not in JOBQUEUE['QUEUES']",
                    id="queue_app.E002",
                )
            )
        try:
            # The check enqueue runs: a payload it refuses would fail at every tick.
            checked_json_text(
                schedule.payload,
                field="payload",
                max_bytes=settings.MAX_PAYLOAD_BYTES,
                max_depth=settings.MAX_PAYLOAD_DEPTH,
            )
        except QueueError as exc:
            errors.append(
                checks.Error(f"schedule {schedule.name!r}: 'payload': {exc.message}", id="queue_app.E002")
            )
    return errors


@checks.register(checks.Tags.caches)
def check_cache_apart_from_queue(app_configs, **kwargs):
    """No Redis cache shares the queue's database: its ``clear()`` (FLUSHDB) would empty the queue."""
    queue_url = conf.redis_url()
    errors = []
    for alias, cache in getattr(django_settings, "CACHES", {}).items():
        if "redis" not in str(cache.get("BACKEND", "")).lower():
            continue
        location = cache.get("LOCATION") or []
        # One URL, or several (a primary and its replicas), as a list or comma-separated.
        urls = location.replace(";", ",").split(",") if isinstance(location, str) else list(location)
        for url in filter(None, (str(url).strip() for url in urls)):
            shared = shared_database(url, queue_url)
            if shared is None:
                continue
            if is_cluster_url(queue_url):
                hint = (
                    "A Redis Cluster has one database only: point CACHE_URL at another Redis server "
                    "(outside the cluster), or accept that clearing the cache empties the queue's "
                    "keys on that node by adding queue_app.E004 to SILENCED_SYSTEM_CHECKS."
                )
            else:
                hint = (
                    "Point CACHE_URL at another database or server; unset, it takes the other "
                    "database of the queue's pair (0 <-> 1, 2 <-> 3, ...)."
                )
            errors.append(
                checks.Error(
                    f"The cache {alias!r} and the queue (REDIS_URL) use one Redis database ({shared}): "
                    "cache.clear() empties it, and with it every queue's ready, in-flight and retry ids.",
                    hint=hint,
                    obj=f"CACHES[{alias!r}]['LOCATION']",
                    id="queue_app.E004",
                )
            )
    return errors
