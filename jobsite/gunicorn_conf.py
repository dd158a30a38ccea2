"""gunicorn's configuration, taken from the Django settings (which read the environment).

    gunicorn --config python:jobsite.gunicorn_conf --bind 0.0.0.0:8000

``manage.py runweb`` runs exactly this; see WEB_* in jobsite/settings.py.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")

from django.conf import settings  # noqa: E402 - needs DJANGO_SETTINGS_MODULE first

wsgi_app = "jobsite.wsgi:application"
# Threads keep client connections alive between requests; the sync worker closes every one.
worker_class = "gthread"
workers = settings.WEB_WORKERS
threads = settings.WEB_THREADS
timeout = settings.WEB_TIMEOUT
keepalive = settings.WEB_KEEPALIVE
graceful_timeout = settings.WEB_GRACEFUL_TIMEOUT
# Errors to stderr; no access log (one line per request costs more than the request's logging).
errorlog = "-"


# The web processes share one metrics directory, which /metrics sums; runsystem names one
# for all its children, otherwise gunicorn's master makes its own before forking.
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    from queue_app.observability.multiproc import prepare_directory, remove_directory

    _metrics_directory, _ = prepare_directory()

    def on_exit(server):
        remove_directory(_metrics_directory)
