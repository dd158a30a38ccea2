"""Celery's canvas on the queue's workflows: signatures, ``chain``, ``group``, ``chord``.

A signature (``add.s(2, 2)``) is a task with its arguments and options, sent with
``delay()`` or ``apply_async()``. A chain, group or chord compiles to one workflow
(queue_app/engine/workflows.py) enqueued in one transaction: each task signature is a
step, and a step waits for the steps before it. Celery passes what a task returned as
the first argument of the next one (a group's results as one list, in group order); here
the step's payload names which parents' results it takes, by position (``"parents"``),
and the worker reads them from PostgreSQL before calling the task. An immutable
signature (``.si()``) takes none. A failed task cancels the steps after it (the
workflow's default failure policy), and their results' ``get()`` raise its error.

Groups nested in a group are unrolled into it, as Celery does; a chain in a group that
ends in a group gives that member's results as a list. What has no step to map to is
refused with the shape named: ``link``/``on_error`` callbacks, ``freeze()``, ``map``,
``starmap`` and ``chunks``, a signature as a dict, a countdown on a task that waits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from queue_app.contrib.celery.task import Task, registered_task

if TYPE_CHECKING:
    from queue_app.contrib.celery.result import AsyncResult, GroupResult
    from queue_app.services import JobRequest

# Options a canvas's apply_async gives every step that sets none of its own.
STEP_DEFAULTS = ("queue", "priority")
# Options timed from the enqueue: given to a canvas, they apply to its first steps only.
START_OPTIONS = ("countdown", "eta", "expires")


NO_ERRBACKS = "a failed task cancels the tasks chained after it; handle the error in the task"


def refused(what: str, instead: str) -> NotImplementedError:
    return NotImplementedError(f"{what}: {instead}")


class Signature:
    """A task with its arguments and options: ``add.s(2, 2)``, ``add.si(2, 2)`` (immutable)."""

    def __init__(self, task: Task, args: tuple = (), kwargs: dict | None = None, options: dict | None = None):
        self.task = task
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.options = dict(options or {})
        self.immutable = bool(self.options.pop("immutable", False))

    def set(self, immutable: bool | None = None, **options: Any) -> Signature:
        """Add options (``queue``, ``countdown``, ...); returns the signature itself, as Celery's."""
        if immutable is not None:
            self.immutable = bool(immutable)
        self.options.update(options)
        return self

    def set_immutable(self, immutable: bool) -> None:
        self.immutable = bool(immutable)

    def clone(self, args: tuple | None = None, kwargs: dict | None = None, **options: Any) -> Signature:
        """A copy with ``args`` before its own and ``kwargs`` over its own (ignored if immutable)."""
        if self.immutable:
            args, kwargs = (), {}
        copy = Signature(
            self.task,
            (*(args or ()), *self.args),
            {**self.kwargs, **(kwargs or {})},
            {**self.options, **options},
        )
        copy.immutable = self.immutable
        return copy

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return self.apply_async(args, kwargs)

    def apply_async(
        self, args: tuple | None = None, kwargs: dict | None = None, **options: Any
    ) -> AsyncResult:
        """Send with ``args`` first, then its own (kwargs merged), unless immutable."""
        sent = self.clone(args, kwargs, **options)
        return self.task.apply_async(sent.args, sent.kwargs, **sent.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task here and now, as Celery does for ``add.s(2, 2)()``."""
        called = self.clone(args, kwargs)
        return self.task(*called.args, **called.kwargs)

    def __or__(self, other: Any) -> chain:
        return chain(self, other)

    def __invert__(self) -> Any:
        return self.apply_async().get()

    def link(self, callback: Any) -> Any:
        raise refused("link()", "chain the next task instead: sig | callback")

    def link_error(self, errback: Any) -> Any:
        raise refused("link_error()", NO_ERRBACKS)

    on_error = link_error

    def freeze(self, *args: Any, **kwargs: Any) -> Any:
        raise refused("freeze()", "a task's id is made when it is enqueued; apply_async() returns it")

    @property
    def name(self) -> str:
        return self.task.name

    def __repr__(self) -> str:
        arguments = [repr(arg) for arg in self.args] + [
            f"{key}={value!r}" for key, value in self.kwargs.items()
        ]
        return f"{self.task.name}({', '.join(arguments)})"


class Canvas:
    """What chains, groups and chords share: sent as one workflow, combined with ``|``."""

    def __init__(self) -> None:
        self.options: dict[str, Any] = {}

    def set(self, **options: Any) -> Canvas:
        self.options.update(options)
        return self

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult | GroupResult:
        return self.apply_async(args, kwargs)

    def apply_async(
        self, args: tuple | None = None, kwargs: dict | None = None, **options: Any
    ) -> AsyncResult | GroupResult:
        """Enqueue every step in one transaction (the caller's, if any); ``args`` / ``kwargs``
        go to the first tasks, as Celery gives them. Returns the last task's result (a
        GroupResult when the canvas ends in a group)."""
        return _enqueue(self, tuple(args or ()), dict(kwargs or {}), {**self.options, **options})

    def __or__(self, other: Any) -> chain:
        return chain(self, other)

    def __invert__(self) -> Any:
        return self.apply_async().get()

    def link(self, callback: Any) -> Any:
        raise refused("link()", "chain the next task instead: canvas | callback")

    def link_error(self, errback: Any) -> Any:
        raise refused("link_error()", NO_ERRBACKS)

    on_error = link_error

    def freeze(self, *args: Any, **kwargs: Any) -> Any:
        raise refused("freeze()", "the tasks' ids are made when the workflow is enqueued")


class chain(Canvas):  # noqa: N801 - Celery's name
    """``chain(a, b, c)`` or ``a | b | c``: each task gets the one before's result first."""

    def __init__(self, *tasks: Any, **options: Any) -> None:
        super().__init__()
        if len(tasks) == 1 and _is_iterable(tasks[0]):
            tasks = tuple(tasks[0])
        # A chain in a chain is the same chain.
        self.tasks = tuple(
            item for task in tasks for item in (task.tasks if isinstance(task, chain) else (task,))
        )
        self.options.update(options)

    def __call__(self, *args: Any, **kwargs: Any) -> AsyncResult | GroupResult:
        return self.apply_async(args, kwargs)

    def __repr__(self) -> str:
        return " | ".join(repr(task) for task in self.tasks) or "chain()"


class group(Canvas):  # noqa: N801 - Celery's name
    """``group(a, b)``, ``group([a, b])`` or ``group(task.s(i) for i in ...)``: side by side;
    what follows gets their results as one list, in this order."""

    def __init__(self, *tasks: Any, **options: Any) -> None:
        super().__init__()
        if len(tasks) == 1 and _is_iterable(tasks[0]):
            tasks = tuple(tasks[0])
        # A group in a group is unrolled into it, as in Celery.
        self.tasks = tuple(
            item for task in tasks for item in (task.tasks if isinstance(task, group) else (task,))
        )
        self.options.update(options)

    def __call__(self, *partial_args: Any, **options: Any) -> GroupResult:
        return self.apply_async(partial_args, **options)

    def __repr__(self) -> str:
        return f"group([{', '.join(repr(task) for task in self.tasks)}])"


class chord(Canvas):  # noqa: N801 - Celery's name
    """``chord(header, body)()`` or ``chord(header)(body)``: the header side by side, then
    the body with the list of their results, in header order."""

    def __init__(self, header: Any, body: Any = None, **options: Any) -> None:
        super().__init__()
        self.header = header if isinstance(header, group) else group(header)
        self.body = body
        self.options.update(options)

    @property
    def tasks(self) -> tuple:
        return self.header.tasks

    def __call__(self, body: Any = None, **options: Any) -> AsyncResult | GroupResult:
        if body is not None:
            return chord(self.header, body, **self.options).apply_async(**options)
        return self.apply_async(**options)

    def apply_async(
        self, args: tuple | None = None, kwargs: dict | None = None, **options: Any
    ) -> AsyncResult | GroupResult:
        if self.body is None:
            raise TypeError("chord() has no body: chord(header)(body), or chord(header, body)()")
        return super().apply_async(args, kwargs, **options)

    def __repr__(self) -> str:
        return f"chord({self.header!r}, {self.body!r})"


def signature(
    varies: str | Task | Signature | dict, args: tuple | None = None, kwargs: dict | None = None, **options
):
    """``signature("tasks.add", args=(2, 2))``, ``signature(add, ...)``, or a copy of one."""
    if isinstance(varies, dict):
        raise refused(
            "signature(dict)", "signatures are not sent through a broker here; pass the task or its name"
        )
    if isinstance(varies, Signature):
        return varies.clone(**options)
    task = registered_task(varies) if isinstance(varies, str) else varies
    return Signature(task, tuple(args or ()), dict(kwargs or {}), options)


def chunks(task: Any, it: Any, n: int):
    raise refused("chunks()", "send a group of the task, one signature per chunk's items")


def xmap(task: Any, it: Any):
    raise refused("map()", "send a group of the task, group(task.s(item) for item in items)")


def xstarmap(task: Any, it: Any):
    raise refused("starmap()", "send a group of the task, group(task.s(*args) for args in items)")


def _is_iterable(value: Any) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, (Signature, Canvas, str, bytes, dict))


# --- Compiling a canvas to a workflow ------------------------------------------------------

# Which parents' results a step takes: one position, or a list of them (nested as groups nest).
Shape = int | list


@dataclass
class _Compiled:
    """What follows a canvas node waits on (``exits``) and takes (``shape``, positions in
    ``exits``), and how its result is built once the steps have ids (``result``)."""

    exits: list[JobRequest]
    shape: Shape | None
    result: Any  # a JobRequest (one task), or a list of them (a group), nested


class _Compiler:
    def __init__(self, options: dict[str, Any]) -> None:
        self.steps: dict[str, JobRequest] = {}
        self.defaults = {key: options.pop(key) for key in STEP_DEFAULTS if key in options}
        self.start = {key: options.pop(key) for key in START_OPTIONS if key in options}
        self.ignored = options  # checked (and refused if unknown) by each task's job_request

    def node(
        self, node: Any, incoming: list[JobRequest], shape: Shape | None, call: tuple[tuple, dict] | None
    ) -> _Compiled:
        if isinstance(node, Signature):
            return self.task(node, incoming, shape, call)
        if isinstance(node, chord):
            if node.body is None:
                raise TypeError(f"{node!r} in a canvas needs its body: chord(header, body)")
            return self.node(chain(node.header, node.body), incoming, shape, call)
        if isinstance(node, chain):
            if not node.tasks:
                raise TypeError("chain() needs at least one task")
            compiled = _Compiled(incoming, shape, None)
            for index, item in enumerate(node.tasks):
                previous = compiled.result
                compiled = self.node(item, compiled.exits, compiled.shape, call if index == 0 else None)
                if index:
                    compiled.result = ("parent", compiled.result, previous)
            return compiled
        if isinstance(node, group):
            exits: list[JobRequest] = []
            shapes: list[Shape] = []
            results = []
            for item in node.tasks:
                member = self.node(item, incoming, shape, call)
                shapes.append(_shifted(member.shape, len(exits)))
                exits.extend(member.exits)
                results.append(member.result)
            # An empty group waits on what came before it, and passes on an empty list.
            return _Compiled(exits if node.tasks else incoming, shapes, results)
        if isinstance(node, Task):
            raise TypeError(
                f"{node!r} in a canvas must be a signature: {node.name.rsplit('.', 1)[-1]}.s(...)"
            )
        raise TypeError(
            f"{node!r} cannot be a step of a canvas: it holds task signatures (task.s(...)), "
            "chains, groups and chords"
        )

    def task(
        self, sig: Signature, incoming: list[JobRequest], shape: Shape | None, call: tuple[tuple, dict] | None
    ) -> _Compiled:
        if call is not None:
            sig = sig.clone(*call)
        options = {**self.defaults, **self.ignored, **sig.options}
        if not incoming:
            options = {**self.start, **options}
        elif any(isinstance(options.get(key), int | float) for key in ("countdown", "expires")):
            key = "countdown" if isinstance(options.get("countdown"), int | float) else "expires"
            raise refused(
                f"{key}= on {sig!r}, a task that waits for others",
                "Celery counts it from when they finish; give a moment instead (eta=, expires=datetime)",
            )
        takes = None if sig.immutable or shape is None else shape
        request = sig.task.job_request(sig.args, sig.kwargs, parents=takes, **options)
        request.depends_on = list(incoming)
        self.steps[f"{len(self.steps)}.{sig.task.name}"[:200]] = request
        return _Compiled([request], 0, request)


def _shifted(shape: Shape | None, offset: int) -> Shape:
    if isinstance(shape, list):
        return [_shifted(item, offset) for item in shape]
    return (shape or 0) + offset


def _enqueue(canvas: Canvas, args: tuple, kwargs: dict, options: dict[str, Any]) -> AsyncResult | GroupResult:
    from queue_app.services import enqueue_workflow

    compiler = _Compiler(dict(options))
    compiled = compiler.node(canvas, [], None, (args, kwargs) if args or kwargs else None)
    if not compiler.steps:
        # Nothing to run (an empty group): Celery's result of it is an empty list.
        return _result(compiled.result, {}, None)
    workflow = enqueue_workflow(compiler.steps, name=repr(canvas)[:200])
    ids = {id(request): str(workflow.jobs[name].id) for name, request in compiler.steps.items()}
    return _result(compiled.result, ids, str(workflow.id))


def _result(plan: Any, ids: dict[int, str], workflow_id: str | None, parent: Any = None):
    """The result object of a compiled node: AsyncResult for a task, GroupResult for a
    group, and for a chain its last node's, with ``parent`` the one before."""
    from queue_app.contrib.celery.result import AsyncResult, GroupResult

    if isinstance(plan, tuple) and plan[0] == "parent":
        _, last, previous = plan
        return _result(last, ids, workflow_id, parent=_result(previous, ids, workflow_id))
    if isinstance(plan, list):
        return GroupResult(workflow_id, [_result(item, ids, workflow_id) for item in plan], parent=parent)
    return AsyncResult(ids[id(plan)], parent=parent)
