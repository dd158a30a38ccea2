"""A process tree's own metrics endpoint, for hosts where no web process shares its directory.

``runworker --metrics-port`` and ``reconcile_queue --metrics-port`` serve the
counters of the command and of every child it forks. The gauges read from
the stores (depths, outbox backlog) stay on the web's /metrics, so they are
not scraped once per worker host.
"""

from __future__ import annotations

import atexit

from queue_app.observability.metrics import counters_registry, multiprocess_directory
from queue_app.observability.multiproc import prepare_directory, remove_directory


def serve_metrics(port: int, *, address: str = "0.0.0.0") -> None:
    """Serve this process's and its children's counters on ``address:port``, in a daemon thread.

    Call before forking: without PROMETHEUS_MULTIPROC_DIR a private directory
    is made (and removed at exit) so the children's values reach this server.
    """
    if not multiprocess_directory():
        directory, _ = prepare_directory()
        atexit.register(remove_directory, directory)
    from prometheus_client import start_http_server

    start_http_server(port, addr=address, registry=counters_registry())
