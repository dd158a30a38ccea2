"""The directory where a host's processes keep their Prometheus values (prometheus_client's
multiprocess mode), set up by the command that starts those processes."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from queue_app.observability.metrics import MULTIPROC_ENV


def prepare_directory() -> tuple[Path, bool]:
    """Point PROMETHEUS_MULTIPROC_DIR at an empty directory for the children about to start.

    A directory already named in the environment is emptied (the values of
    processes from an earlier run would otherwise be summed in forever);
    otherwise a new temporary one is made. Returns it and whether it was made
    here (and so is the caller's to remove, with ``remove_directory``).
    Call before any child starts: prometheus_client reads the variable once,
    when a process first imports it.
    """
    named = os.environ.get(MULTIPROC_ENV, "")
    if named:
        directory = Path(named)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):
            stale.unlink(missing_ok=True)
        return directory, False
    directory = Path(tempfile.mkdtemp(prefix="jobqueue-metrics-"))
    os.environ[MULTIPROC_ENV] = str(directory)
    return directory, True


def remove_directory(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
