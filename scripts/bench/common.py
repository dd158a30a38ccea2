"""The workload every system runs, and the measurements taken from it (BENCH method).

Each system is an adapter with the same small interface; ``measure`` drives
it through enqueue, bulk enqueue, drains with 1 and 2 worker processes and
enqueue-to-start latency, and returns one flat dict of figures. Start times
come from the journal every handler appends to (``record_start``), which also
proves that each job ran exactly once. Systems with workflows also run a chord
(fan-out, then a callback that waits for every job) and a chain, timed from the
enqueue call to the moment their own state records the last job finished.
"""

from __future__ import annotations

import abc
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]
BENCH_DIR = Path(__file__).resolve().parent
# The tree whose project "ours" runs: this one, or a checkout of an earlier commit (run.py
# --baseline).
OURS_TREE = Path(os.environ.get("BENCH_OURS_TREE") or ROOT).resolve()
POLL_SECONDS = 0.025

# Redis databases of the benchmark (8-12); each system empties its own.
REDIS_DB = {"ours": 8, "celery": 9}


@dataclass(frozen=True)
class Workload:
    jobs: int = 5_000
    latency_rate: float = 200.0
    latency_seconds: float = 10.0
    saturation_jobs: int = 1_000
    timeout: float = 300.0
    chord_jobs: int = 1_000
    chain_steps: int = 20
    # Chords and chains per repetition (alternated); the repetition's figure is their median;
    # 0 skips them.
    workflow_repeats: int = 3


def server_url(name: str) -> str:
    """URL of database ``name`` on BENCH_DATABASE_URL's server."""
    base = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    return urlunsplit(urlsplit(base)._replace(path=f"/{name}"))


def database_url(name: str) -> str:
    """URL of database ``name`` on BENCH_DATABASE_URL's server (created when missing)."""
    url = server_url(name)
    import psycopg

    with psycopg.connect(server_url("postgres"), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    return url


def redis_url(db: int) -> str:
    base = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    return urlunsplit(urlsplit(base)._replace(path=f"/{db}"))


def uuid7_sql(timestamp: str) -> str:
    """SQL for a version 7 id stamped with the SQL timestamp ``timestamp``, as the queue makes
    them (queue_app/ids.py): seeded rows are time-ordered in every index, as real ones are,
    not scattered as random ids would be. The random v4 bytes keep their variant; the first
    48 bits become the Unix milliseconds and the version nibble goes from 4 to 7."""
    millis = f"substring(int8send(floor(extract(epoch FROM {timestamp}) * 1000)::bigint) FROM 3)"
    stamped = f"overlay(uuid_send(gen_random_uuid()) PLACING {millis} FROM 1 FOR 6)"
    return f"encode(set_bit(set_bit({stamped}, 52, 1), 53, 1), 'hex')::uuid"


def journal_path() -> Path:
    return Path(os.environ["BENCH_JOURNAL"])


_journal_fd: int | None = None


def record_start(arg: int) -> int:
    """What every benchmark handler does: one unbuffered append of "arg start_microseconds"."""
    global _journal_fd
    if _journal_fd is None:
        _journal_fd = os.open(os.environ["BENCH_JOURNAL"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_journal_fd, f"{arg} {time.time_ns() // 1000}\n".encode())
    return arg


def read_journal() -> dict[int, int]:
    """arg -> start time (µs); fails when any job ran more than once."""
    starts: dict[int, int] = {}
    counts: Counter[int] = Counter()
    for line in journal_path().read_text().splitlines():
        arg, started = line.split()
        counts[int(arg)] += 1
        starts[int(arg)] = int(started)
    repeated = [arg for arg, count in counts.items() if count > 1]
    if repeated:
        raise RuntimeError(f"{len(repeated)} jobs ran more than once, e.g. {repeated[:5]}")
    return starts


def reset_journal() -> None:
    journal_path().write_text("")


def wait_until(condition, *, timeout: float, what: str, every: float | None = None) -> float:
    """Poll ``condition`` every 25 ms (or ``every`` s); the time.time() at which it first held."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return time.time()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(POLL_SECONDS if every is None else every)


def spawn(command: list[str], env: dict[str, str], log_name: str, cwd: Path = ROOT) -> subprocess.Popen:
    """Start a worker command in its own process group, its output into the run's log folder."""
    log_dir = Path(os.environ["BENCH_LOG_DIR"])
    log = open(log_dir / f"{log_name}.log", "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop_all(processes: list[subprocess.Popen]) -> None:
    """Kill the process groups we started, once their part of the measurement is over: a
    graceful stop measures nothing and costs some peers 1-4 s per process."""
    for process in processes:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the command and any children it started
        except ProcessLookupError:
            pass
    for process in processes:
        process.wait()


def percentiles(values_ms: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values_ms, n=100, method="inclusive")
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98]}


class Adapter(abc.ABC):
    """One system under test. ``args`` are ints; every handler calls ``record_start(arg)``."""

    name = ""

    def reset(self) -> None:  # noqa: B027 - an optional hook
        """Empty the system's queue and history."""

    @abc.abstractmethod
    def enqueue(self, arg: int) -> None: ...

    @abc.abstractmethod
    def enqueue_bulk(self, args: list[int]) -> None: ...

    def after_enqueue(self) -> dict[str, float]:
        """Work between enqueue and a ready queue (our relay); its figures."""
        return {}

    @abc.abstractmethod
    def start_workers(self, processes: int) -> list[subprocess.Popen]: ...

    @abc.abstractmethod
    def done(self) -> int:
        """How many jobs the system's own state says are done."""
        ...

    # Workflows: systems without them leave ``workflows`` False and show no such figures.
    workflows = False

    def start_workflow_workers(self, processes: int) -> list[subprocess.Popen]:
        return self.start_workers(processes)

    def enqueue_chord(self, args: list[int], callback_arg: int):
        """One job per arg side by side, then a callback that waits for all of them and reads
        their results; a handle for ``finished_at``."""
        raise NotImplementedError

    def enqueue_chain(self, args: list[int]):
        """One job per arg, each waiting for the one before; a handle for ``finished_at``."""
        raise NotImplementedError

    def finished_at(self, handle) -> float | None:
        """When the system's own state says the handle's last job finished (epoch seconds,
        as it recorded it), or None while it has not; raises if that job failed."""
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 - an optional hook
        pass


def _drain(adapter: Adapter, processes: int, workload: Workload) -> dict[str, float]:
    spawned = time.time()
    workers = adapter.start_workers(processes)
    try:
        done_at = wait_until(
            lambda: adapter.done() >= workload.jobs,
            timeout=workload.timeout,
            what=f"{workload.jobs} jobs done",
        )
    finally:
        stop_all(workers)
    starts = read_journal()
    if len(starts) != workload.jobs:
        raise RuntimeError(f"{len(starts)} of {workload.jobs} jobs started")
    first = min(starts.values()) / 1e6
    return {"rate": workload.jobs / (done_at - first), "startup_s": first - spawned}


def _enqueue_paced(adapter: Adapter, args: range, rate: float | None) -> dict[int, float]:
    """Enqueue one call per job, at ``rate`` per second or as fast as possible; arg -> t0."""
    sent: dict[int, float] = {}
    started = time.perf_counter()
    for index, arg in enumerate(args):
        if rate:
            delay = started + index / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        sent[arg] = time.time()
        adapter.enqueue(arg)
    return sent


def _latencies(adapter: Adapter, sent: dict[int, float], already_done: int, workload: Workload) -> dict:
    wait_until(
        lambda: adapter.done() >= already_done + len(sent), timeout=workload.timeout, what="latency jobs done"
    )
    starts = read_journal()
    missing = [arg for arg in sent if arg not in starts]
    if missing:
        raise RuntimeError(f"{len(missing)} latency jobs never started")
    return percentiles([(starts[arg] / 1e6 - t0) * 1000 for arg, t0 in sent.items()])


def _finished(adapter: Adapter, handle, workload: Workload, what: str) -> float:
    finished: list[float] = []

    def recorded() -> bool:
        at = adapter.finished_at(handle)
        if at is not None:
            finished.append(at)
        return at is not None

    wait_until(recorded, timeout=workload.timeout, what=what)
    return finished[0]


def _workflows(adapter: Adapter, workload: Workload) -> dict[str, float]:
    """A chord of ``chord_jobs`` and a chain of ``chain_steps``, with workers running and warm
    (2 processes, as the 2-process drain): each from the time taken just before the enqueue
    call to the last job's finish as the system recorded it (polled every 25 ms, so the
    polling adds nothing). The median of ``workflow_repeats`` of each, alternated."""
    adapter.reset()
    reset_journal()
    workers = adapter.start_workflow_workers(2)
    chords: list[float] = []
    chains: list[float] = []
    next_arg = 40_000_000
    try:
        _finished(adapter, adapter.enqueue_chain([next_arg]), workload, "the warm-up chain")
        next_arg += 1
        for _ in range(workload.workflow_repeats):
            args = list(range(next_arg, next_arg + workload.chord_jobs))
            callback = next_arg + workload.chord_jobs
            next_arg = callback + 1
            started = time.time()
            handle = adapter.enqueue_chord(args, callback)
            chords.append(_finished(adapter, handle, workload, "the chord's callback") - started)

            args = list(range(next_arg, next_arg + workload.chain_steps))
            next_arg += workload.chain_steps
            started = time.time()
            handle = adapter.enqueue_chain(args)
            chains.append(_finished(adapter, handle, workload, "the chain's last step") - started)
    finally:
        stop_all(workers)
    ran = len(read_journal())  # raises if a job ran twice
    if ran != next_arg - 40_000_000:
        raise RuntimeError(f"{ran} of {next_arg - 40_000_000} workflow jobs ran")
    chain_ms = statistics.median(chains) * 1000
    return {
        "chord_ms": statistics.median(chords) * 1000,
        "chain_ms": chain_ms,
        "chain_step_ms": chain_ms / workload.chain_steps,
    }


def measure(adapter: Adapter, workload: Workload) -> dict[str, float]:
    """Every figure for one system, one repetition."""
    figures: dict[str, float] = {}
    n = workload.jobs

    adapter.reset()
    reset_journal()
    started = time.perf_counter()
    for arg in range(n):
        adapter.enqueue(arg)
    figures["enqueue"] = n / (time.perf_counter() - started)
    figures.update(adapter.after_enqueue())
    drain = _drain(adapter, 1, workload)
    figures["drain_1"], figures["startup_1_s"] = drain["rate"], drain["startup_s"]

    adapter.reset()
    reset_journal()
    started = time.perf_counter()
    for start in range(0, n, 1000):
        adapter.enqueue_bulk(list(range(start, min(n, start + 1000))))
    figures["bulk_enqueue"] = n / (time.perf_counter() - started)
    adapter.after_enqueue()
    drain = _drain(adapter, 2, workload)
    figures["drain_2"], figures["startup_2_s"] = drain["rate"], drain["startup_s"]

    adapter.reset()
    reset_journal()
    workers = adapter.start_workers(1)
    try:
        adapter.enqueue(10_000_000)  # warm-up: the worker is up and has run one job
        wait_until(lambda: adapter.done() >= 1, timeout=workload.timeout, what="the warm-up job")
        count = int(workload.latency_rate * workload.latency_seconds)
        sent = _enqueue_paced(adapter, range(20_000_000, 20_000_000 + count), workload.latency_rate)
        fixed = _latencies(adapter, sent, 1, workload)
        sent = _enqueue_paced(adapter, range(30_000_000, 30_000_000 + workload.saturation_jobs), None)
        saturated = _latencies(adapter, sent, 1 + count, workload)
    finally:
        stop_all(workers)
    figures.update({f"latency_{key}_ms": value for key, value in fixed.items()})
    figures.update({f"saturation_{key}_ms": value for key, value in saturated.items()})

    if adapter.workflows and workload.workflow_repeats:
        figures.update(_workflows(adapter, workload))
    return figures


def python() -> str:
    return sys.executable
