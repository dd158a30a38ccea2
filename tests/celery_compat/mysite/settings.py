"""A Django project that moved from Celery: the suite's settings (its stores), the Celery
compatibility app, and the shop app whose tasks.py was written for Celery.

Worker processes of tests/celery_compat run with these settings; with the tutorials'
folder on PYTHONPATH, CELERY_IMPORTS loads their modules as ``celery -A tasks`` and
``celery -A proj`` would.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "queue_app.contrib.celery", "tests.celery_compat.shop"]

CELERY_IMPORTS = ["tasks", "proj.celery", "tests.celery_compat.canvas_tasks"]
# Read through app.config_from_object(..., namespace="CELERY"); changes nothing here.
CELERY_BROKER_URL = "redis://localhost:6379/0"
CELERY_TASK_DEFAULT_QUEUE = "default"

EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
EMAIL_FILE_PATH = os.environ.get("SHOP_MAIL_DIR", "")
