"""Serve HTTP with gunicorn, configured from the settings (jobsite/gunicorn_conf.py)."""

import os
import sys

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve the web side (admin, API) with gunicorn; WEB_* settings size it."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default="127.0.0.1:8000", help="address:port (default 127.0.0.1:8000)")

    def handle(self, *args, bind, **options):
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "--config",
            "python:jobsite.gunicorn_conf",
            "--bind",
            bind,
        ]
        # gunicorn reaches the same stores (embedded or not) without looking for them again.
        env = {**os.environ, "DATABASE_URL": settings.DATABASE_URL, "REDIS_URL": settings.REDIS_URL}
        sys.stdout.flush()
        sys.stderr.flush()
        # exec: gunicorn's master takes this process's pid and its signals (SIGTERM stops it gracefully).
        os.execve(sys.executable, command, env)
