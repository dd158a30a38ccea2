"""gunicorn's configuration for ``manage.py runweb``, from the settings of the project that runs it.

    DJANGO_SETTINGS_MODULE=mysite.settings gunicorn --config python:queue_app.runtime.gunicorn_conf --bind ...

Serves the project's ``WSGI_APPLICATION``, sized by the ``WEB_*`` settings (defaults in
queue_app/conf.py).
"""

import os

from django.conf import settings

from queue_app import conf


def wsgi_app_path(setting: str) -> str:
    """Django's dotted ``WSGI_APPLICATION`` ("mysite.wsgi.application") as gunicorn's
    "module:attribute"."""
    module, _, attribute = setting.rpartition(".")
    return f"{module}:{attribute}"


wsgi_app = wsgi_app_path(settings.WSGI_APPLICATION)
# Threads keep client connections alive between requests; the sync worker closes every one.
worker_class = "gthread"
workers = conf.project_setting("WEB_WORKERS")
threads = conf.project_setting("WEB_THREADS")
timeout = conf.project_setting("WEB_TIMEOUT")
keepalive = conf.project_setting("WEB_KEEPALIVE")
graceful_timeout = conf.project_setting("WEB_GRACEFUL_TIMEOUT")
# Errors to stderr; no access log (one line per request costs more than the request's logging).
errorlog = "-"


# The web processes share one metrics directory, which /metrics sums; runsystem names one
# for all its children, otherwise gunicorn's master makes its own before forking.
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    from queue_app.observability.multiproc import prepare_directory, remove_directory

    _metrics_directory, _ = prepare_directory()

    def on_exit(server):
        remove_directory(_metrics_directory)
