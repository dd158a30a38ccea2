"""Django settings for django-tasks-db: the ORM backend of Django's ``django.tasks``."""

import dj_database_url
from common import database_url

SECRET_KEY = "benchmark-only-key-not-secret"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django_tasks_db"]
# Persistent connections, as docs/explanation/benchmarks.md configures the worker.
DATABASES = {"default": dj_database_url.parse(database_url("bench_djtasks"), conn_max_age=600)}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
