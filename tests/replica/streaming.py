"""A PostgreSQL primary and hot standbys streaming from it, each in a folder of its own.

The servers come from pgserver's binaries (tests/pgserver_binaries.py; run as the
unprivileged user pgserver uses when the tests run as root). They listen on 127.0.0.1
only, on ports nobody else took, with no Unix socket. A standby is a physical copy
(``pg_basebackup -R``) that replays the primary's WAL: what a deployment's streaming replica is.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import psycopg

from tests.helpers import wait_until
from tests.pgserver_binaries import postgres_binaries

DATABASE = "queue"
# Fast to start and to write, and nothing to keep: the folder goes when the test ends.
SERVER_SETTINGS = ("fsync=off", "wal_level=replica", "hot_standby=on", "max_connections=50")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def url(port: int) -> str:
    return f"postgres://postgres@127.0.0.1:{port}/{DATABASE}"


def connect(port: int, database: str = DATABASE) -> psycopg.Connection:
    return psycopg.connect(host="127.0.0.1", port=port, dbname=database, user="postgres", autocommit=True)


class Server:
    """One postgres process over one data folder."""

    def __init__(self, folder: Path, bin_path: Path, user: str | None) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.bin_path = bin_path
        self.user = user
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return url(self.port)

    def command(self, program: str, *args: str) -> list[str]:
        as_user = ["runuser", "-u", self.user, "--"] if self.user else []
        return [*as_user, str(self.bin_path / program), *args]

    def run(self, program: str, *args: str) -> None:
        done = subprocess.run(self.command(program, *args), capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip()}")

    def make_folder(self) -> None:
        self.folder.mkdir(mode=0o755)
        if self.user:
            shutil.chown(self.folder, self.user, self.user)

    def start(self) -> None:
        settings = [option for setting in SERVER_SETTINGS for option in ("-c", setting)]
        log = open(self.folder / "postgres.log", "ab")
        self.process = subprocess.Popen(
            self.command("postgres", "-D", str(self.data), "-p", str(self.port), *settings)
            + ["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_until(
            lambda: connect(self.port, "postgres").close() or True,
            timeout=60,
            message=f"PostgreSQL on port {self.port}",
            ignoring=(psycopg.Error, OSError),
        )

    def stop(self) -> None:
        """A fast shutdown (SIGINT); SIGKILL after 20 s. Safe to call twice."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGINT)
            self.process.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None


class StreamingReplication:
    """``start`` the primary (with the ``queue`` database), ``add_standby`` replicas, ``stop`` them all."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        bin_path, self.user = postgres_binaries()
        # The folder is the test's (mode 700 under root): the servers' user must reach its own.
        os.chmod(folder, 0o755)
        self.primary = Server(folder / "primary", bin_path, self.user)
        self.standbys: list[Server] = []

    def start(self) -> None:
        primary = self.primary
        primary.make_folder()
        primary.run("initdb", "-D", str(primary.data), "--auth=trust", "--username=postgres", "--no-sync")
        with open(primary.data / "pg_hba.conf", "a") as hba:
            hba.write("host replication postgres 127.0.0.1/32 trust\n")
        primary.start()
        with connect(primary.port, "postgres") as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')

    def add_standby(self) -> Server:
        """A hot standby copied from the primary as it is now, replaying its WAL from then on."""
        standby = Server(self.folder / f"standby{len(self.standbys) + 1}", self.primary.bin_path, self.user)
        standby.make_folder()
        standby.run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres",
            "-D", str(standby.data), "-R", "-X", "stream", "--checkpoint=fast", "--no-sync",
        )  # fmt: skip
        self.standbys.append(standby)
        standby.start()
        return standby

    def caught_up(self, standby: Server) -> None:
        """Wait until ``standby`` has replayed everything the primary has written so far."""
        with connect(self.primary.port) as primary:
            written = primary.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        with connect(standby.port) as replica:
            wait_until(
                lambda: replica.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [written]
                ).fetchone()[0],
                timeout=60,
                message=f"the standby on port {standby.port} to replay up to {written}",
                ignoring=(psycopg.Error, OSError),
            )

    def stop(self) -> None:
        for server in [*self.standbys, self.primary]:
            server.stop()
