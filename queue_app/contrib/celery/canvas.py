"""Signatures (``add.s(2, 2)``) for sending later; chains, groups and chords are not here yet.

A signature is a task with its arguments and options, sent with ``delay()`` or
``apply_async()``. Combining them (``|``, ``chain``, ``group``, ``chord``, ``map``,
``starmap``, ``chunks``) needs jobs that wait for other jobs: it arrives with the
queue's workflows and raises NotImplementedError until then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from queue_app.contrib.celery.task import Task, registered_task

if TYPE_CHECKING:
    from queue_app.contrib.celery.result import AsyncResult

WORKFLOWS = (
    "arrives with the queue's workflows (jobs that wait for other jobs); until then, "
    "send the next task from the task before it"
)


def not_yet(what: str) -> NoReturn:
    raise NotImplementedError(f"{what} {WORKFLOWS}")


class Signature:
    def __init__(self, task: Task, args: tuple = (), kwargs: dict | None = None, options: dict | None = None):
        self.task = task
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.options = dict(options or {})
        self.immutable = bool(self.options.pop("immutable", False))

    def set(self, **options: Any) -> Signature:
        self.options.update(options)
        return self

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return self.apply_async(args, kwargs)

    def apply_async(
        self, args: tuple | None = None, kwargs: dict | None = None, **options: Any
    ) -> AsyncResult:
        """Send with these arguments first, then ``args`` (kwargs merged), unless immutable."""
        if self.immutable:
            args, kwargs = (), {}
        return self.task.apply_async(
            (*self.args, *(args or ())), {**self.kwargs, **(kwargs or {})}, **{**self.options, **options}
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.task(*self.args, *args, **{**self.kwargs, **kwargs})

    def __or__(self, other: Any) -> NoReturn:
        not_yet("chain (sig | sig)")

    def __repr__(self) -> str:
        arguments = [repr(arg) for arg in self.args] + [
            f"{key}={value!r}" for key, value in self.kwargs.items()
        ]
        return f"{self.task.name}({', '.join(arguments)})"


def signature(
    varies: str | Task | Signature, args: tuple | None = None, kwargs: dict | None = None, **options
):
    """``signature("tasks.add", args=(2, 2))``, ``signature(add, ...)``, or a copy of one."""
    if isinstance(varies, Signature):
        return Signature(varies.task, varies.args, varies.kwargs, {**varies.options, **options})
    task = registered_task(varies) if isinstance(varies, str) else varies
    return Signature(task, tuple(args or ()), dict(kwargs or {}), options)


def chain(*tasks: Any, **options: Any) -> NoReturn:
    not_yet("chain()")


def group(*tasks: Any, **options: Any) -> NoReturn:
    not_yet("group()")


def chord(header: Any, body: Any = None, **options: Any) -> NoReturn:
    not_yet("chord()")


def chunks(task: Any, it: Any, n: int) -> NoReturn:
    not_yet("chunks()")


def xmap(task: Any, it: Any) -> NoReturn:
    not_yet("xmap()")


def xstarmap(task: Any, it: Any) -> NoReturn:
    not_yet("xstarmap()")
