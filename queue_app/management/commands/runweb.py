"""Serve HTTP with gunicorn, configured from the settings (jobsite/gunicorn_conf.py)."""

import os
import re
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

# HOST:PORT (an IPv6 host in brackets) or unix:PATH. gunicorn reads an empty host as
# every interface and fails only in its workers on a bad port, so both are refused here.
BIND = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):([0-9]{1,5})|unix:\S+")


def check_bind(bind: str) -> None:
    """Refuse a --bind that is not HOST:PORT (port 1-65535) or unix:PATH."""
    match = BIND.fullmatch(bind)
    if not match or (match[2] and not 0 < int(match[2]) < 65536):
        raise CommandError(f"--bind: expected HOST:PORT (port 1-65535) or unix:PATH, not {bind!r}")


class Command(BaseCommand):
    help = "Serve the web side (admin, API) with gunicorn; WEB_* settings size it."

    def add_arguments(self, parser):
        parser.add_argument(
            "--bind", default="127.0.0.1:8000", help="HOST:PORT or unix:PATH (default 127.0.0.1:8000)"
        )

    def handle(self, *args, bind, **options):
        check_bind(bind)
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
