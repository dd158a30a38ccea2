"""Start-up checks: a bad JOBQUEUE value stops every command with its key named, and so
does a cache in the queue's Redis database, or a replica database without its router."""

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


# The apps the queue's API and admin need beside queue_app: the browsable API's and the
# log-in pages' templates, the token table, the list filters' forms, the schema's views and
# templates, and Swagger UI's static files.
REQUIRED_APPS = [
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
]
# Caches that each process keeps to itself (or that keep nothing): a failure limit counted in
# one of them is per process, and throttles too.
PROCESS_LOCAL_CACHES = (
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
)


def _is_admin(app: str) -> bool:
    """Whether an INSTALLED_APPS entry is Django's admin: its module, or an AppConfig of it
    (a project's own admin site is installed as a subclass of AdminConfig)."""
    if app == "django.contrib.admin":
        return True
    from django.contrib.admin.apps import SimpleAdminConfig
    from django.utils.module_loading import import_string

    try:
        config = import_string(app)
    except ImportError:
        return False
    return isinstance(config, type) and issubclass(config, SimpleAdminConfig)


@checks.register()
def check_host_project(app_configs, **kwargs):
    """What a project that adds queue_app must also have; each message names what to add."""
    from django.conf import settings
    from django.db import connections

    messages = []
    if connections["default"].vendor != "postgresql":
        messages.append(
            checks.Error(
                "queue_app needs PostgreSQL: DATABASES['default'] uses"
                f" {settings.DATABASES['default'].get('ENGINE')!r}.",
                hint="Set DATABASES['default']['ENGINE'] to 'django.db.backends.postgresql'.",
                id="queue_app.E010",
            )
        )
    installed = list(settings.INSTALLED_APPS)
    for app in REQUIRED_APPS:
        if app not in installed:
            messages.append(
                checks.Error(
                    f"queue_app needs {app!r} in INSTALLED_APPS.",
                    hint=f"Add {', '.join(repr(a) for a in REQUIRED_APPS if a not in installed)}.",
                    id="queue_app.E011",
                )
            )
    admin_at = next((index for index, app in enumerate(installed) if _is_admin(app)), None)
    if admin_at is not None and "queue_app" in installed:
        if installed.index("queue_app") > admin_at:
            messages.append(
                checks.Warning(
                    "queue_app comes after django.contrib.admin in INSTALLED_APPS: the admin index"
                    " shows no link to the queue dashboard.",
                    hint="Put 'queue_app' before 'django.contrib.admin'.",
                    id="queue_app.W012",
                )
            )
    try:
        limited = conf.auth_failure_limit() is not None
    except conf.SettingError as exc:
        messages.append(checks.Error(str(exc), id="queue_app.E004"))
        limited = False
    backend = settings.CACHES.get("default", {}).get("BACKEND", "")
    if limited and backend in PROCESS_LOCAL_CACHES:
        messages.append(
            checks.Warning(
                f"CACHES['default'] is {backend.rsplit('.', 1)[-1]}: the failed-authentication limit"
                " (AUTH_FAILURE_RATE) and the API's throttles count in each process apart.",
                hint="Use a cache every process shares, e.g. Redis:"
                " {'BACKEND': 'django.core.cache.backends.redis.RedisCache', 'LOCATION': REDIS_URL}.",
                id="queue_app.W013",
            )
        )
    return messages


@checks.register()
def check_task_queues(app_configs, **kwargs):
    """``@task`` functions reach the job queue only through a TASKS alias on JobQueueBackend, and
    only on the queues that alias lists: each JOBQUEUE queue should be one of them."""
    from django.conf import settings
    from django.tasks import InvalidTaskBackend, task_backends

    from queue_app.tasks_backend import JobQueueBackend

    try:
        queues = conf.queue_settings().QUEUES
        backends = task_backends.all()
    except (conf.SettingError, InvalidTaskBackend):
        return []  # queue_app.E001 or Django's own tasks check names the bad setting
    ours = [backend for backend in backends if isinstance(backend, JobQueueBackend)]
    path = f"{JobQueueBackend.__module__}.{JobQueueBackend.__qualname__}"
    if not ours:
        used = sorted({settings.TASKS[backend.alias]["BACKEND"] for backend in backends})
        return [
            checks.Warning(
                f"No TASKS backend is {path}: @task functions run with {', '.join(used) or 'nothing'},"
                " not as jobs of the queue.",
                hint=f"Set TASKS = {{'default': {{'BACKEND': '{path}'}}}} (or silence queue_app.W106"
                " if only enqueue_job() is used).",
                id="queue_app.W106",
            )
        ]
    served = set().union(*(backend.queues for backend in ours))
    return [
        checks.Warning(
            f"JOBQUEUE queue {name!r} is in no TASKS alias's QUEUES: @task(queue_name={name!r}) is refused.",
            hint=f"Add {name!r} to TASKS[{ours[0].alias!r}]['QUEUES'] (or silence queue_app.W105 if only"
            " enqueue_job() uses it).",
            id="queue_app.W105",
        )
        for name in queues
        if name not in served
    ]


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
                    "keys on that node by adding queue_app.E014 to SILENCED_SYSTEM_CHECKS."
                )
            else:
                hint = (
                    "Point the cache's LOCATION at another database or server (redis://host:6379/1, "
                    "say). This project's own settings read it from CACHE_URL; unset, it takes the "
                    "other database of the queue's pair (0 <-> 1, 2 <-> 3, ...)."
                )
            errors.append(
                checks.Error(
                    f"The cache {alias!r} and the queue (REDIS_URL) use one Redis database ({shared}): "
                    "cache.clear() empties it, and with it every queue's ready, in-flight and retry ids.",
                    hint=hint,
                    obj=f"CACHES[{alias!r}]['LOCATION']",
                    id="queue_app.E014",
                )
            )
    return errors


@checks.register()
def check_replica_router(app_configs, **kwargs):
    """A ``replica`` database is read only through ReplicaRouter: without it the history pages
    read the primary and the replica is configured for nothing."""
    from django.db import router

    from queue_app.replica import REPLICA_ALIAS, ReplicaRouter

    if REPLICA_ALIAS not in getattr(django_settings, "DATABASES", {}):
        return []
    if any(isinstance(each, ReplicaRouter) for each in router.routers):
        return []
    path = f"{ReplicaRouter.__module__}.{ReplicaRouter.__qualname__}"
    return [
        checks.Error(
            f"DATABASES has a {REPLICA_ALIAS!r} database but DATABASE_ROUTERS has no {path}: the admin's"
            " history lists, the dashboard and the API's job list would read the primary, and another"
            " router could send the queue's own reads (claims, cancels) to the replica.",
            hint=f"Add {path!r} to DATABASE_ROUTERS (jobsite/settings.py lists it),"
            f" or remove DATABASES[{REPLICA_ALIAS!r}].",
            obj=f"DATABASES[{REPLICA_ALIAS!r}]",
            id="queue_app.E015",
        )
    ]
