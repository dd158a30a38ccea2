"""Run the whole system in one terminal: web, relay, worker, reconciler and scheduler."""

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.urls import NoReverseMatch, reverse
from django.utils.autoreload import get_child_arguments
from rest_framework.authtoken.models import Token

from queue_app.management.commands.runweb import check_bind, check_gunicorn, store_environment
from queue_app.management.options import seconds
from queue_app.observability.multiproc import prepare_directory, remove_directory

RESTART_DELAY_SECONDS = 2.0


def manage_command() -> list[str]:
    """How this process was started, less its arguments (``python manage.py``, ``python -m
    django``, ``django-admin``): the children run their commands the same way, with the same
    settings."""
    arguments = get_child_arguments()
    return arguments[: len(arguments) - (len(sys.argv) - 1)]


def development_data_dir() -> Path | None:
    """Where jobsite's development set-up keeps its files (the admin's password); None in any
    other project, where runsystem creates no user (``createsuperuser`` makes one)."""
    try:
        from jobsite.embedded import DATA_DIR
    except ImportError:
        return None
    return DATA_DIR


def url_of(name: str) -> str | None:
    """The path of a named URL of the project, None where the project does not route it."""
    try:
        return reverse(name)
    except NoReverseMatch:
        return None


class Command(BaseCommand):
    help = (
        "Start the web server (gunicorn), a relay, workers, the reconciler and the scheduler as children, "
        "restart any that dies, and stop them all on Ctrl-C / SIGTERM."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--bind", default="127.0.0.1:8000", help="HOST:PORT or unix:PATH of the web server"
        )
        parser.add_argument("--concurrency", type=int, default=2, help="worker processes (default 2)")
        parser.add_argument(
            "--reconcile-interval", type=float, default=30.0, help="seconds between reconciles"
        )
        parser.add_argument(
            "--no-admin-user", action="store_true", help="do not create the development admin"
        )
        parser.add_argument(
            "--no-web", action="store_true", help="start no web server (the project serves HTTP itself)"
        )

    def handle(self, *args, bind, concurrency, reconcile_interval, no_admin_user, no_web, **options):
        # Checked before anything starts: a child refusing its option would be restarted forever.
        check_bind(bind)
        if not no_web:
            check_gunicorn()
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        seconds("--reconcile-interval", reconcile_interval)
        manage = manage_command()
        commands = {
            **({} if no_web else {"web": [*manage, "runweb", f"--bind={bind}"]}),
            "relay": [*manage, "runrelay"],
            "worker": [*manage, "runworker", f"--concurrency={concurrency}", "--name=runsystem"],
            "reconciler": [*manage, "reconcile_queue", "--loop", f"--interval={reconcile_interval:g}"],
            "scheduler": [*manage, "runscheduler"],
        }
        # Every child writes its metrics to one directory, which /metrics sums (the web child).
        metrics_directory, made_here = prepare_directory()
        # Children reach the same stores, embedded or not, without starting their own.
        env = {**os.environ, **store_environment()}
        if settings.DEBUG and not no_web:
            data_dir = None if no_admin_user else development_data_dir()
            self._print_urls(bind, data_dir)

        children: dict[str, subprocess.Popen] = {}
        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        for name, command in commands.items():
            children[name] = subprocess.Popen(command, env=env)
        self.stdout.write(
            f"Started {', '.join(f'{n} (pid {p.pid})' for n, p in children.items())}. Ctrl-C stops."
        )
        try:
            while not stopping:
                time.sleep(0.5)
                for name, process in children.items():
                    if process.poll() is not None and not stopping:
                        self.stderr.write(f"{name} exited with {process.returncode}; restarting")
                        time.sleep(RESTART_DELAY_SECONDS)
                        children[name] = subprocess.Popen(commands[name], env=env)
        finally:
            for process in children.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 60
            for name, process in children.items():
                try:
                    process.wait(timeout=max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    self.stderr.write(f"{name} did not stop in time; killing it")
                    process.kill()
                    process.wait()
            if made_here:
                remove_directory(metrics_directory)
        self.stdout.write("All processes stopped.")

    def _print_urls(self, bind: str, data_dir: Path | None) -> None:
        """Development only: where the admin, the API and its docs are; with jobsite's data
        folder, also an admin login (created once, its password saved there) and its token."""
        base = f"http://{bind}"
        login = self._development_login(data_dir) if data_dir is not None else None
        password = f"   user: admin   password: {login[0]}" if login else ""
        token = f"   (Authorization: Token {login[1]})" if login else ""
        admin, dashboard = url_of("admin:index"), url_of("admin:queue_app_job_dashboard")
        jobs, docs, health = url_of("job-list"), url_of("docs"), url_of("health")
        lines = [
            admin and f"  Admin:      {base}{admin}{password}",
            dashboard and f"  Dashboard:  {base}{dashboard}",
            jobs and f"  API:        {base}{jobs}{token}",
            docs and f"  API docs:   {base}{docs}",
            health and f"  Health:     {base}{health}",
        ]
        self.stdout.write("\n".join(["", *filter(None, lines), ""]))

    def _development_login(self, data_dir: Path) -> tuple[str, str]:
        """The development admin's password and API token, the user created on first use."""
        credentials = data_dir / "admin-login.txt"
        User = get_user_model()
        user = User.objects.filter(username="admin").first()
        if user is None or not credentials.exists():
            password = secrets.token_urlsafe(12)
            if user is None:
                user = User.objects.create_superuser("admin", "admin@example.com", password)
            else:
                user.set_password(password)
                user.save(update_fields=["password"])
            data_dir.mkdir(parents=True, exist_ok=True)
            credentials.write_text(password)
            credentials.chmod(0o600)
        password = credentials.read_text().strip()
        token, _ = Token.objects.get_or_create(user=user)
        if not user.check_password(password):
            raise CommandError(f"{credentials} does not match the admin user; delete it and start again")
        return password, token.key
