"""django-tasks-db (Django 6.1 ``django.tasks`` + its ORM backend): ``enqueue``, ``db_worker``."""

from __future__ import annotations

import os

from common import BENCH_DIR, ROOT, Adapter, python, record_start, spawn

# The task decorator reads settings.TASKS on import.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "peer_djtasks_settings")
from django.tasks import task  # noqa: E402


@task
def noop(n: int) -> int:
    return record_start(n)


class DjangoTasksPeer(Adapter):
    name = "django-tasks-db"

    def __init__(self) -> None:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from django_tasks_db.models import DBTaskResult

        self.results = DBTaskResult

    def reset(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {connection.ops.quote_name(self.results._meta.db_table)}")

    def enqueue(self, arg: int) -> None:
        noop.enqueue(arg)

    def enqueue_bulk(self, args: list[int]) -> None:
        from django.db import transaction

        with transaction.atomic():
            for arg in args:
                noop.enqueue(arg)

    def start_workers(self, processes: int):
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "peer_djtasks_settings",
            "PYTHONPATH": os.pathsep.join([str(BENCH_DIR), str(ROOT)]),
        }
        command = [python(), "-m", "django", "db_worker"]
        return [spawn(command, env, f"djtasks-{index}") for index in range(processes)]

    def done(self) -> int:
        return self.results.objects.filter(status="SUCCESSFUL").count()


ADAPTER = DjangoTasksPeer
