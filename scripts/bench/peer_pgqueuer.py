"""pgqueuer 1.x with the psycopg driver: ``Queries.enqueue``, workers running ``pgqueuer.run()``.

The entrypoint has no ``concurrency_limit`` (1 or 2 stalled in tests; docs/explanation/benchmarks.md);
each worker process is one ``pgqueuer.run`` on its own connection.
"""

from __future__ import annotations

import asyncio
import os
from contextlib import asynccontextmanager

import psycopg
from common import BENCH_DIR, ROOT, Adapter, database_url, python, spawn
from pgqueuer import PgQueuer, PsycopgDriver, Queries

WORKER = "import asyncio, pgqueuer; asyncio.run(pgqueuer.run('peer_pgqueuer:create_pgqueuer'))"


@asynccontextmanager
async def create_pgqueuer():
    """The worker factory ``pgqueuer.run`` loads."""
    from common import record_start

    connection = await psycopg.AsyncConnection.connect(os.environ["BENCH_PGQUEUER_URL"], autocommit=True)
    pgq = PgQueuer(PsycopgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job) -> None:
        record_start(int(job.payload))

    try:
        yield pgq
    finally:
        await connection.close()


class PgQueuerPeer(Adapter):
    name = "pgqueuer"

    def __init__(self) -> None:
        self.url = database_url("bench_pgqueuer")
        self.loop = asyncio.new_event_loop()
        self.connection = self.loop.run_until_complete(
            psycopg.AsyncConnection.connect(self.url, autocommit=True)
        )
        self.queries = Queries(PsycopgDriver(self.connection))
        if not self.loop.run_until_complete(self.queries.schema_is_installed()):
            self.loop.run_until_complete(self.queries.install())

    def reset(self) -> None:
        self.loop.run_until_complete(self.queries.clear_queue())
        self.loop.run_until_complete(self.queries.clear_queue_log())

    def enqueue(self, arg: int) -> None:
        self.loop.run_until_complete(self.queries.enqueue("noop", str(arg).encode()))

    def enqueue_bulk(self, args: list[int]) -> None:
        self.loop.run_until_complete(
            self.queries.enqueue(["noop"] * len(args), [str(arg).encode() for arg in args], [0] * len(args))
        )

    def start_workers(self, processes: int):
        env = {
            **os.environ,
            "BENCH_PGQUEUER_URL": self.url,
            "PYTHONPATH": os.pathsep.join([str(BENCH_DIR), str(ROOT)]),
        }
        return [spawn([python(), "-c", WORKER], env, f"pgqueuer-{index}") for index in range(processes)]

    def done(self) -> int:
        async def count() -> int:
            cursor = await self.connection.execute(
                "SELECT CASE WHEN EXISTS (SELECT 1 FROM pgqueuer) THEN 0 ELSE "
                "(SELECT count(*) FROM pgqueuer_log WHERE status = 'successful') END"
            )
            return (await cursor.fetchone())[0]

        return self.loop.run_until_complete(count())

    def close(self) -> None:
        self.loop.run_until_complete(self.connection.close())
        self.loop.close()


ADAPTER = PgQueuerPeer
