"""The relay listens again after its PostgreSQL connection is cut (as a server restart does).

The relay runs with a 60 s poll, so a job reaching Redis within seconds can only
have been woken by NOTIFY on a LISTEN made after the outage.
"""

import json
import subprocess
import threading

import pytest
from django.db import connection

from queue_app.services import enqueue_job
from tests.helpers import child_env, kill_group, listening_backends, manage, ready_score, wait_until
from tests.reconciler.proxy import postgres_proxy, postgres_via

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


@pytest.fixture
def postgres_link():
    proxy = postgres_proxy(connection.settings_dict)
    proxy.start()
    yield proxy
    proxy.stop()


def test_relay_listens_again_after_its_connection_is_cut(postgres_link, redis_client):
    env = child_env(
        DATABASE_URL=postgres_via(connection.settings_dict, postgres_link),
        DATABASE_POOL_TIMEOUT="1",
        LOG_LEVEL="INFO",
    )
    relay = manage("runrelay", "--poll=60", env=env, stderr=subprocess.PIPE, text=True)
    events: list[str] = []

    def read() -> None:
        for line in relay.stderr:
            if line.startswith("{"):
                events.append(json.loads(line)["event"])

    threading.Thread(target=read, daemon=True).start()
    try:
        before = wait_until(listening_backends, timeout=60, message="the relay's LISTEN")
        first = enqueue_job("demo.echo")
        wait_until(lambda: ready_score(redis_client, str(first.id)) is not None, timeout=20)

        postgres_link.stop()
        # Noticed by whichever of its connections the relay uses first: the batch's or the LISTEN's.
        noticed = {"relay_listen_failed", "store_unavailable"}
        wait_until(lambda: noticed & set(events), timeout=30, message="the cut to be noticed")
        wait_until(lambda: not listening_backends() & before, timeout=30, message="the old session to end")
        postgres_link.start()

        wait_until(listening_backends, timeout=60, message="a new LISTEN")
        second = enqueue_job("demo.echo")
        # Far inside the 60 s poll: only a NOTIFY can have woken the relay.
        wait_until(lambda: ready_score(redis_client, str(second.id)) is not None, timeout=20)
        assert relay.poll() is None
    finally:
        kill_group(relay)
