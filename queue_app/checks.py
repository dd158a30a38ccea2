"""Start-up checks: a bad JOBQUEUE value stops every command with its key named."""

from django.core import checks

from queue_app import conf


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
