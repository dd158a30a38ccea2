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
