"""The project's ``.env``: what ``./dev up`` leaves for every other terminal in the checkout.

``KEY=VALUE`` lines (``#`` starts a comment line; no quoting or expansion).
A variable already in the environment wins, so a deployment's own settings
are never overridden by a file left in the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path


def load(path: Path | str) -> None:
    """Set each variable of the file at ``path`` that the environment does not have; no file, no change."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, value = line.split("=", 1)
        os.environ.setdefault(name.strip(), value.strip())
