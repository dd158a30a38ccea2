"""A ``Celery`` app object: what task modules and a project's ``celery.py`` use of it.

It holds no broker or result backend (PostgreSQL and Redis are the queue's own, from
the Django settings): ``broker=`` / ``backend=`` are accepted and ignored. Its ``conf``
is read for ``task_default_queue``, ``imports`` and ``include``; any other key is kept
and changes nothing (``task_always_eager`` is refused when a task is sent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib import import_module
from typing import Any

from queue_app.contrib.celery.result import AsyncResult
from queue_app.contrib.celery.task import Task, registered_task, registered_tasks, task_decorator

# The apps made in this process, and the current one: the last made with set_as_current
# (Celery's default), which shared tasks use.
_apps: list[Celery] = []
_current: list[Celery] = []


class Settings(dict):
    """``app.conf``: a dict whose keys read as attributes too (``app.conf.task_default_queue``)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


class Celery:
    task_cls: type[Task] = Task

    def __init__(
        self,
        main: str | None = None,
        *,
        broker: str | None = None,
        backend: str | None = None,
        include: Iterable[str] | None = None,
        task_cls: type[Task] | None = None,
        set_as_current: bool = True,
        **config: Any,
    ) -> None:
        self.main = main
        if task_cls is not None:
            self.task_cls = task_cls
        self._conf = Settings(config)
        # config_from_object sources, read on first use of conf: a project's celery.py
        # runs while Django still imports its settings, which cannot be read yet.
        self._sources: list[tuple[Any, str | None]] = []
        self._imports: list[str] = list(include or ())
        # autodiscover_tasks(): of the installed apps (None) or of these packages, once ready.
        self.discover_installed_apps: str | None = None
        self._packages: tuple[Any, str] | None = None
        _apps.append(self)
        if set_as_current:
            _current[:] = [self]

    @property
    def conf(self) -> Settings:
        while self._sources:
            source, namespace = self._sources.pop(0)
            self._conf.update(_read_config(source, namespace))
        return self._conf

    def config_from_object(self, obj: Any, namespace: str | None = None, **ignored: Any) -> None:
        """Settings from an object or its import path (``"django.conf:settings"``); with a
        ``namespace``, only its ``NAMESPACE_KEY`` settings, as ``key`` (Celery's lowercase names)."""
        self._sources.append((obj, namespace))

    def task(self, *args: Any, **options: Any):
        """``@app.task``, ``@app.task()`` or ``@app.task(bind=True, ...)``."""
        return task_decorator(self, args, options)

    @property
    def tasks(self) -> dict[str, Task]:
        return registered_tasks()

    def autodiscover_tasks(
        self,
        packages: Iterable[str] | Callable[[], Iterable[str]] | None = None,
        related_name: str = "tasks",
        force: bool = False,
    ) -> None:
        """Import ``<package>.tasks`` of each package (the installed Django apps when none are
        given) once Django is ready: ``queue_app.contrib.celery`` in INSTALLED_APPS does it."""
        if packages is None:
            self.discover_installed_apps = related_name
        else:
            self._packages = (packages, related_name)

    def modules_to_import(self) -> tuple[list[str], list[str]]:
        """(modules that must be imported, modules imported if they exist), for the app config."""
        conf = self.conf
        required = [*self._imports, *conf.get("imports", ()), *conf.get("include", ())]
        self._imports = []
        optional: list[str] = []
        if self._packages is not None:
            names, related_name = self._packages
            names = names() if callable(names) else names
            optional = [f"{name}.{related_name}" for name in names]
            self._packages = None
        return required, optional

    def send_task(
        self, name: str, args: tuple | list | None = None, kwargs: dict | None = None, **options: Any
    ):
        """Send the task registered under ``name`` (its module must be imported in this process)."""
        return registered_task(name).apply_async(args, kwargs, **options)

    def AsyncResult(self, task_id: str) -> AsyncResult:  # noqa: N802 - Celery's name
        return AsyncResult(task_id, app=self)

    def start(self, argv: list[str] | None = None) -> None:
        raise NotImplementedError("workers start with `manage.py runworker` (see the queue's commands)")

    worker_main = start

    def __repr__(self) -> str:
        return f"<Celery {self.main or '__main__'} on the job queue>"


def current_app() -> Celery | None:
    return _current[0] if _current else None


def apps() -> list[Celery]:
    return list(_apps)


def _read_config(source: Any, namespace: str | None) -> dict[str, Any]:
    if isinstance(source, str):
        module, _, attribute = source.partition(":")
        source = import_module(module)
        if attribute:
            source = getattr(source, attribute)
    prefix = f"{namespace}_" if namespace else ""
    values = {}
    for key in dir(source):
        if key.startswith("_") or not key.startswith(prefix):
            continue
        name = key[len(prefix) :]
        values[name.lower() if namespace else name] = getattr(source, key)
    return values
