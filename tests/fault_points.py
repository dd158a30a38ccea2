"""The fault-point handler of fault-injection tests and the chaos run, kept out of the app.

The relay and the worker call ``FAULT_POINT_HANDLER`` (when set) with the name
of each fault point they pass; the test settings (tests/settings.py, which the
chaos run uses too) name ``hit`` there only when ``JOBSITE_FAILPOINTS`` is set.
``JOBSITE_FAILPOINTS="relay.after_push=kill"`` makes the process SIGKILL itself
the first time it reaches that point; ``=kill@0.2`` does so with probability
0.2 at each hit. ``=stop`` makes it SIGSTOP itself there, once (the test sends
the SIGCONT): a process frozen at the worst moment, as a stall or a pause would
leave it. The app's wheel does not carry this module.
"""

from __future__ import annotations

import os
import random
import signal
from functools import cache

from django.conf import settings

from queue_app.observability.logs import get_logger

log = get_logger(__name__)


# The points whose one-off action (stop) has been taken in this process.
_taken: set[str] = set()


@cache
def _armed() -> dict[str, tuple[str, float]]:
    """name -> (action, probability)."""
    points = {}
    for item in filter(None, getattr(settings, "FAILPOINTS", "").split(",")):
        name, _, action = item.partition("=")
        action, _, probability = action.partition("@")
        points[name.strip()] = (action.strip() or "kill", float(probability or 1.0))
    return points


def hit(name: str) -> None:
    armed = _armed().get(name)
    if armed is None:
        return
    action, probability = armed
    if action == "stop":
        if name not in _taken:
            _taken.add(name)
            log.warning("failpoint_stop", point=name, pid=os.getpid())
            os.kill(os.getpid(), signal.SIGSTOP)
    elif random.random() < probability:
        # Written before the kill, so a chaos run can count the kills from the logs.
        log.warning("failpoint_kill", point=name, pid=os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)
