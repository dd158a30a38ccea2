"""Add ``"queue_app.contrib.celery"`` to INSTALLED_APPS and every process (above all the
workers) imports the Celery task modules at start-up, as ``celery worker`` does: the
``CELERY_IMPORTS`` setting's modules, each app's ``include`` / ``imports``, and the
``tasks`` modules of the installed apps once ``app.autodiscover_tasks()`` asked for them.
"""

from importlib import import_module

from django.apps import AppConfig
from django.conf import settings
from django.utils.module_loading import autodiscover_modules, module_has_submodule


class CeleryCompatConfig(AppConfig):
    name = "queue_app.contrib.celery"
    label = "queue_app_celery"
    verbose_name = "Celery task API"

    def ready(self) -> None:
        from queue_app.contrib.celery.app import apps

        for module in getattr(settings, "CELERY_IMPORTS", ()):
            import_module(module)
        # An imported module may make an app whose include names more: until none is left.
        seen: set[int] = set()
        while pending := [app for app in apps() if id(app) not in seen]:
            for app in pending:
                seen.add(id(app))
                required, optional = app.modules_to_import()
                for module in required:
                    import_module(module)
                for module in optional:
                    package, _, submodule = module.rpartition(".")
                    if module_has_submodule(import_module(package), submodule):
                        import_module(module)
        related = {app.discover_installed_apps for app in apps()} - {None}
        for name in sorted(related):
            autodiscover_modules(name)
