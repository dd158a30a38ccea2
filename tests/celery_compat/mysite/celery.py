# Celery's "First steps with Django" proj/celery.py
# (https://docs.celeryq.dev/en/stable/django/first-steps-with-django.html),
# unchanged but for its import (was: from celery import Celery) and the project's name.
import os

from queue_app.contrib.celery import Celery

# Set the default Django settings module for the 'celery' program.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.celery_compat.mysite.settings")

app = Celery("mysite")

# Using a string here means the worker doesn't have to serialize
# the configuration object to child processes.
# - namespace='CELERY' means all celery-related configuration keys
#   should have a `CELERY_` prefix.
app.config_from_object("django.conf:settings", namespace="CELERY")

# Load task modules from all registered Django apps.
app.autodiscover_tasks()


@app.task(bind=True, ignore_result=True)
def debug_task(self):
    print(f"Request: {self.request!r}")
