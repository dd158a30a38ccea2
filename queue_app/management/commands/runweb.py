"""Serve HTTP with gunicorn, configured from the settings (queue_app/runtime/gunicorn_conf.py)."""

import importlib.util
import os
import re
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from queue_app import conf

# HOST:PORT (an IPv6 host in brackets) or unix:PATH. gunicorn reads an empty host as
# every interface and fails only in its workers on a bad port, so both are refused here.
BIND = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):([0-9]{1,5})|unix:\S+")


def check_bind(bind: str) -> None:
    """Refuse a --bind that is not HOST:PORT (port 1-65535) or unix:PATH."""
    match = BIND.fullmatch(bind)
    if not match or (match[2] and not 0 < int(match[2]) < 65536):
        raise CommandError(f"--bind: expected HOST:PORT (port 1-65535) or unix:PATH, not {bind!r}")


def check_gunicorn() -> None:
    """Refuse to start without gunicorn, which the app does not require (the ``web`` extra)."""
    if importlib.util.find_spec("gunicorn") is None:
        raise CommandError(
            "gunicorn is not installed: pip install 'jobsite-queue[web]' (or gunicorn), "
            "or serve the project's WSGI application with a server of your own"
        )


def store_environment() -> dict[str, str]:
    """The store URLs a child process must reach the same stores with. jobsite's settings
    start embedded servers when DATABASE_URL / REDIS_URL are unset, and name them in these
    settings; a child given them connects instead of starting its own."""
    urls = {"REDIS_URL": conf.redis_url()}
    if database_url := getattr(settings, "DATABASE_URL", None):
        urls["DATABASE_URL"] = database_url
    return urls


class Command(BaseCommand):
    help = "Serve the web side (admin, API) with gunicorn; WEB_* settings size it."

    def add_arguments(self, parser):
        parser.add_argument(
            "--bind", default="127.0.0.1:8000", help="HOST:PORT or unix:PATH (default 127.0.0.1:8000)"
        )

    def handle(self, *args, bind, **options):
        check_bind(bind)
        check_gunicorn()
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "--config",
            "python:queue_app.runtime.gunicorn_conf",
            "--bind",
            bind,
        ]
        # gunicorn reaches the same stores (embedded or not) without looking for them again.
        env = {**os.environ, **store_environment()}
        sys.stdout.flush()
        sys.stderr.flush()
        # exec: gunicorn's master takes this process's pid and its signals (SIGTERM stops it gracefully).
        os.execve(sys.executable, command, env)
