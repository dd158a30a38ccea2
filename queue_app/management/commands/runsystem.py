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
from rest_framework.authtoken.models import Token

from queue_app.management.commands.runweb import check_bind
from queue_app.management.options import seconds
from queue_app.observability.multiproc import prepare_directory, remove_directory

RESTART_DELAY_SECONDS = 2.0


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

    def handle(self, *args, bind, concurrency, reconcile_interval, no_admin_user, **options):
        # Checked before anything starts: a child refusing its option would be restarted forever.
        check_bind(bind)
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        seconds("--reconcile-interval", reconcile_interval)
        manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
        commands = {
            "web": [*manage, "runweb", f"--bind={bind}"],
            "relay": [*manage, "runrelay"],
            "worker": [*manage, "runworker", f"--concurrency={concurrency}", "--name=runsystem"],
            "reconciler": [*manage, "reconcile_queue", "--loop", f"--interval={reconcile_interval:g}"],
            "scheduler": [*manage, "runscheduler"],
        }
        # Every child writes its metrics to one directory, which /metrics sums (the web child).
        metrics_directory, made_here = prepare_directory()
        # Children reach the same stores, embedded or not, without starting their own.
        env = {
            **os.environ,
            "DATABASE_URL": settings.DATABASE_URL,
            "REDIS_URL": settings.REDIS_URL,
        }
        if settings.DEBUG and not no_admin_user:
            self._print_login(bind)

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

    def _print_login(self, bind: str) -> None:
        """Development only: an admin login, saved under the data folder, printed with the URLs."""
        from jobsite.embedded import DATA_DIR

        credentials = DATA_DIR / "admin-login.txt"
        User = get_user_model()
        user = User.objects.filter(username="admin").first()
        if user is None or not credentials.exists():
            password = secrets.token_urlsafe(12)
            if user is None:
                user = User.objects.create_superuser("admin", "admin@example.com", password)
            else:
                user.set_password(password)
                user.save(update_fields=["password"])
            DATA_DIR.mkdir(parents=True, exist_ok=True)
            credentials.write_text(password)
            credentials.chmod(0o600)
        password = credentials.read_text().strip()
        token, _ = Token.objects.get_or_create(user=user)
        base = f"http://{bind}"
        if not user.check_password(password):
            raise CommandError(f"{credentials} does not match the admin user; delete it and start again")
        self.stdout.write(
            "\n".join(
                [
                    "",
                    f"  Admin:      {base}/admin/   user: admin   password: {password}",
                    f"  Dashboard:  {base}/admin/queue_app/job/dashboard/",
                    f"  API:        {base}/api/jobs/   (Authorization: Token {token.key})",
                    f"  API docs:   {base}/api/docs/",
                    f"  Health:     {base}/api/health/",
                    "",
                ]
            )
        )
