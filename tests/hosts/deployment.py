"""The queue's processes as they run on app hosts: each host runs a relay, a worker and the
reconciler loop, inside its namespace, reaching the stores over the bridge."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import PROJECT_ROOT
from tests.hosts.network import Host

# What each app host runs: (label, manage.py arguments); the worker's name is the host's.
COMMANDS = (
    ("relay", ["runrelay"]),
    ("worker", ["runworker", "--concurrency", "1"]),
    ("reconciler", ["reconcile_queue", "--loop", "--interval", "1"]),
)


@dataclass
class Process:
    host: Host
    label: str
    process: subprocess.Popen

    @property
    def name(self) -> str:
        return f"{self.host.name} {self.label}"


class Deployment:
    """Starts the processes of each host; ``stop`` asks each to stop (SIGTERM) and returns
    their exit codes; ``kill`` SIGKILLs whatever is left (for a finalizer)."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.processes: list[Process] = []

    def start(self, host: Host) -> None:
        self.logs.mkdir(exist_ok=True)
        for label, args in COMMANDS:
            if label == "worker":
                args = [*args, "--name", host.name]
            with open(self.logs / f"{host.name}-{label}.log", "ab") as log:
                process = subprocess.Popen(
                    host.command([sys.executable, str(PROJECT_ROOT / "manage.py"), *args]),
                    cwd=PROJECT_ROOT,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.processes.append(Process(host, label, process))

    def exited(self) -> list[tuple[str, int]]:
        """(name, exit code) of the processes that ended on their own."""
        return [(p.name, p.process.returncode) for p in self.processes if p.process.poll() is not None]

    def stop(self, timeout: float = 30) -> list[tuple[str, int | None]]:
        for item in self.processes:
            self._signal(item, signal.SIGTERM)
        codes = []
        for item in self.processes:
            try:
                codes.append((item.name, item.process.wait(timeout=timeout)))
            except subprocess.TimeoutExpired:
                codes.append((item.name, None))
        return codes

    def kill(self) -> None:
        for item in self.processes:
            self._signal(item, signal.SIGKILL)
            item.process.wait()

    @staticmethod
    def _signal(item: Process, signum: int) -> None:
        try:
            os.killpg(item.process.pid, signum)
        except ProcessLookupError:
            pass
