from django.apps import AppConfig


class QueueAppConfig(AppConfig):
    name = "queue_app"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        # Registers checks, the settings reload signal and the django.task handler.
        from queue_app import checks, conf, tasks_backend  # noqa: F401

        # Each installed app may register handlers in a ``jobs`` module.
        autodiscover_modules("jobs")
