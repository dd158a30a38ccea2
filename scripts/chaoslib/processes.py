"""The system under test as real OS processes: web server, relays, workers and the reconciler.

Each child is ``manage.py <command>`` in a session of its own, so a signal
sent to its process group reaches a worker supervisor and its forked worker
together. Its output goes to ``<run folder>/logs/<name>.log``. A child that
exits without having been killed on purpose is restarted and counted: for a
relay armed with the ``relay.after_push`` failpoint that is expected; for
anything else it is a finding (processes must ride out store outages).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc; a worker supervisor's forked workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # "pid (comm) state ppid ...": comm may contain spaces, so split after ")".
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return sorted(found)


@dataclass
class Child:
    name: str
    role: str  # "web" | "relay" | "worker" | "reconciler"
    args: list[str]
    env: dict[str, str]
    process: subprocess.Popen | None = None
    # Killed on purpose and not restarted yet.
    down: bool = False
    paused: bool = False
    starts: int = 0
    # Wall-clock time of the latest start: a job claimed before it is an earlier incarnation's.
    started_at: float = 0.0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class Cast:
    """Starts, signals and watches the children."""

    folder: Path
    children: list[Child] = field(default_factory=list)
    # (name, exit code) of exits nobody asked for; relays' failpoint kills are counted apart.
    unexpected_exits: list[tuple[str, int]] = field(default_factory=list)
    failpoint_kills: int = 0
    restarts: Counter = field(default_factory=Counter)
    # (name, exit code) of every stop the run asked for; anything but 0 is a finding.
    stop_exits: list[tuple[str, int | None]] = field(default_factory=list)

    def add(self, name: str, role: str, args: list[str], env: dict[str, str]) -> Child:
        child = Child(name=name, role=role, args=args, env=env)
        self.children.append(child)
        return child

    def by_role(self, role: str) -> list[Child]:
        return [child for child in self.children if child.role == role]

    def start(self, child: Child) -> None:
        (self.folder / "logs").mkdir(exist_ok=True)
        log = open(self.folder / "logs" / f"{child.name}.log", "ab")
        child.started_at = time.time()
        child.process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), *child.args],
            cwd=ROOT,
            env=child.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        child.down = child.paused = False
        child.starts += 1

    def _signal_group(self, child: Child, signum: int) -> None:
        try:
            os.killpg(child.process.pid, signum)
        except ProcessLookupError:
            pass

    def kill(self, child: Child) -> None:
        """SIGKILL the child and everything it forked: nothing gets to clean up."""
        child.down = True
        if child.process is not None:
            self._signal_group(child, signal.SIGKILL)
            child.process.wait()
        child.paused = False

    def kill_one_worker_process(self, child: Child) -> int | None:
        """SIGKILL one forked worker of a supervisor, which restarts it under the same identity."""
        pids = child_pids(child.process.pid) if child.alive else []
        if not pids:
            return None
        try:
            os.kill(pids[0], signal.SIGKILL)
        except ProcessLookupError:
            return None  # it exited meanwhile (its supervisor restarts it): try again later
        return pids[0]

    def pause(self, child: Child) -> None:
        self._signal_group(child, signal.SIGSTOP)
        child.paused = True

    def resume(self, child: Child) -> None:
        self._signal_group(child, signal.SIGCONT)
        child.paused = False

    def terminate(self, child: Child) -> None:
        """Ask for a clean shutdown (SIGTERM) without waiting; ``reap`` collects the exit."""
        child.down = True
        self._signal_group(child, signal.SIGTERM)

    def reap(self, child: Child) -> int:
        """After ``terminate``: the exit code (SIGKILL first if it is still running), kept in
        ``stop_exits`` like a stop's."""
        if child.process.poll() is None:
            if child.paused:
                self.resume(child)
            self._signal_group(child, signal.SIGKILL)
        code = child.process.wait()
        self.stop_exits.append((child.name, code))
        return code

    def stop(self, child: Child, timeout: float = 60) -> int | None:
        """A clean shutdown: SIGTERM (SIGINT for runserver, which exits 0 only on that);
        after ``timeout``, SIGABRT (the children run with PYTHONFAULTHANDLER, so each writes
        where its threads hang to its log), then SIGKILL. Returns the exit code, also kept
        in ``stop_exits``."""
        if child.process is None:
            return None
        if child.paused:
            self.resume(child)
        child.down = True
        if child.process.poll() is None:
            self._signal_group(child, signal.SIGINT if child.role == "web" else signal.SIGTERM)
            try:
                child.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(child, signal.SIGABRT)
                try:
                    child.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._signal_group(child, signal.SIGKILL)
        code = child.process.wait()
        self.stop_exits.append((child.name, code))
        return code

    def watch(self) -> None:
        """Restart children that exited on their own, and count why."""
        for child in self.children:
            if child.down or child.process is None or child.process.poll() is None:
                continue
            code = child.process.returncode
            if child.role == "relay" and code == -signal.SIGKILL and "JOBSITE_FAILPOINTS" in child.env:
                self.failpoint_kills += 1
            else:
                self.unexpected_exits.append((child.name, code))
            self.restarts[child.name] += 1
            self.start(child)

    def logged_failpoint_kills(self, role: str, point: str) -> int:
        """Kills by ``point`` that the children of ``role`` (and their forked workers) logged
        just before the SIGKILL (``failpoint_kill`` in the JSON logs)."""
        kills = 0
        for child in self.by_role(role):
            path = self.folder / "logs" / f"{child.name}.log"
            if not path.exists():
                continue
            for line in path.read_text(errors="replace").splitlines():
                if '"failpoint_kill"' in line and f'"point": "{point}"' in line:
                    kills += 1
        return kills

    def stop_all(self) -> None:
        for child in reversed(self.children):
            if child.alive:
                self.stop(child, timeout=30)
            child.down = True


def wait_for(condition, *, timeout: float, interval: float = 0.2, what: str) -> float:
    """Poll ``condition`` until truthy; returns the seconds it took. Raises TimeoutError."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - started
