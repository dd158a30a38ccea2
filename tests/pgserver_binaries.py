"""The PostgreSQL server binaries pgserver ships, for tests that start servers of their own
(tests/hosts/, tests/replica/), and the user those servers must run as."""

from __future__ import annotations

import os
import warnings
from pathlib import Path


class BinariesMissing(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


def postgres_binaries() -> tuple[Path, str | None]:
    """pgserver's bin folder, and the user its servers must run as (root may not run them)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
            from pgserver._commands import POSTGRES_BIN_PATH
            from pgserver.utils import ensure_user_exists
    except ImportError as exc:
        raise BinariesMissing(f"pgserver is not installed: {exc}") from exc
    if not (Path(POSTGRES_BIN_PATH) / "pg_basebackup").exists():
        raise BinariesMissing(f"no pg_basebackup in {POSTGRES_BIN_PATH}")
    if os.geteuid() != 0:
        return Path(POSTGRES_BIN_PATH), None
    ensure_user_exists("pgserver")
    return Path(POSTGRES_BIN_PATH), "pgserver"
