"""gunicorn's configuration for this project: queue_app's, with jobsite's settings as the default.

    gunicorn --config python:jobsite.gunicorn_conf --bind 0.0.0.0:8000

``manage.py runweb`` runs the same configuration (queue_app/runtime/gunicorn_conf.py);
see WEB_* in jobsite/settings.py.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")

from queue_app.runtime.gunicorn_conf import *  # noqa: E402, F403 - needs DJANGO_SETTINGS_MODULE first
