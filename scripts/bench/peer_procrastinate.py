"""procrastinate 3.x: ``defer_async`` / ``batch_defer_async``, ``procrastinate worker --concurrency``."""

from __future__ import annotations

import asyncio
import os

import procrastinate
from common import BENCH_DIR, ROOT, Adapter, database_url, python, record_start, spawn

# The worker imports this module too: the URL reaches it through the environment.
if "BENCH_PROCRASTINATE_URL" not in os.environ:
    os.environ["BENCH_PROCRASTINATE_URL"] = database_url("bench_procrastinate")
app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["BENCH_PROCRASTINATE_URL"])
)


@app.task(name="noop")
async def noop(n: int) -> int:
    return record_start(n)


class ProcrastinatePeer(Adapter):
    name = "procrastinate"

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(app.open_async())
        installed = self._fetch("SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS n")
        if not installed:
            self.loop.run_until_complete(app.schema_manager.apply_schema_async())

    def _fetch(self, query: str):
        return self.loop.run_until_complete(app.connector.execute_query_one_async(query))["n"]

    def reset(self) -> None:
        self.loop.run_until_complete(
            app.connector.execute_query_async(
                "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers CASCADE"
            )
        )

    def enqueue(self, arg: int) -> None:
        self.loop.run_until_complete(noop.defer_async(n=arg))

    def enqueue_bulk(self, args: list[int]) -> None:
        self.loop.run_until_complete(noop.batch_defer_async(*({"n": arg} for arg in args)))

    def start_workers(self, processes: int):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH_DIR), str(ROOT)])}
        command = [python(), "-m", "procrastinate", "--app=peer_procrastinate.app", "worker"]
        return [spawn([*command, f"--concurrency={processes}"], env, "procrastinate")]

    def done(self) -> int:
        return self._fetch("SELECT count(*) AS n FROM procrastinate_jobs WHERE status = 'succeeded'")

    def close(self) -> None:
        self.loop.run_until_complete(app.close_async())
        self.loop.close()


ADAPTER = ProcrastinatePeer
