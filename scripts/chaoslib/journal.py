"""Reading the execution journal the probe handlers write during a chaos run.

The format is the contract, not the writer's code: one JSON object per line
in ``<dir>/executions-<pid>.jsonl``, ``{"event": "start", "execution",
"job", "attempt", "pid", "at"}`` when a handler starts and ``{"event":
"end", "execution", "outcome", "at"}`` when it returns ("returned") or
raises (the exception's class name). ``at`` is epoch seconds. A line cut
short by a SIGKILL mid-write has no newline and is ignored.
"""

from __future__ import annotations

import json
from pathlib import Path


def read(directory: Path) -> list[dict]:
    """Every journaled execution: its start fields plus ``ended_at`` and ``outcome`` (None if killed)."""
    executions: dict[str, dict] = {}
    for path in sorted(directory.glob("executions-*.jsonl")):
        with path.open() as journal:
            for line in journal:
                if not line.endswith("\n"):
                    continue
                record = json.loads(line)
                if record["event"] == "start":
                    executions[record["execution"]] = {**record, "ended_at": None, "outcome": None}
                elif record["execution"] in executions:
                    executions[record["execution"]].update(ended_at=record["at"], outcome=record["outcome"])
    return list(executions.values())
