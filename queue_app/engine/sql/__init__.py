"""Every hand-written SQL statement, named and kept in the ``.sql`` files beside this module.

Each file holds the statements of one concern; a statement starts with a
``-- name: <name>`` line and runs to the next one. Code runs them by name::

    cursor.execute(sql.query("claim_jobs"), params)

Values are always bound parameters; the statements are fixed text, never
built by formatting values or identifiers into them.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.M)


@cache
def _queries() -> dict[str, str]:
    queries: dict[str, str] = {}
    for path in sorted(Path(__file__).parent.glob("*.sql")):
        parts = _NAME.split(path.read_text())
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise ValueError(f"SQL statement {name!r} is defined twice ({path.name})")
            queries[name] = body.strip()
    return queries


def query(name: str) -> str:
    """The statement called ``name``; KeyError names it when there is none."""
    try:
        return _queries()[name]
    except KeyError:
        raise KeyError(f"no SQL statement named {name!r} in queue_app/engine/sql/") from None


def names() -> list[str]:
    return sorted(_queries())
