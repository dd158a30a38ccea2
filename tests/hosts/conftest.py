"""Fixtures of the many-hosts tests: the namespaced network, its stores, and a run folder kept
when the test fails (the processes' logs, the servers' logs and the execution journal)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.hosts.network import NamespacesUnavailable, Network, why_unavailable
from tests.hosts.stores import Stores


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.stash[_failed] = report.failed
    return report


_failed = pytest.StashKey[bool]()


@pytest.fixture
def run_folder(request):
    """A folder of the run (not pytest's tmp_path: the servers' user must reach it)."""
    folder = Path(tempfile.mkdtemp(prefix="jq-hosts-"))
    yield folder
    if request.node.stash.get(_failed, False):
        print(f"run folder kept: {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def network():
    """A bridge in a namespace of its own; skipped where namespaces cannot be created."""
    reason = why_unavailable()
    if reason:
        pytest.skip(f"needs Linux network namespaces: {reason}")
    net = Network()
    try:
        try:
            net.start()
        except NamespacesUnavailable as exc:
            pytest.skip(f"needs Linux network namespaces, and this machine refused one: {exc}")
        yield net
    finally:
        net.close()


@pytest.fixture
def stores(network, run_folder):
    """PostgreSQL and Redis in the host "stores", one address each."""
    if shutil.which("runuser") is None:
        pytest.skip("needs runuser (util-linux) to start PostgreSQL as its own user inside a namespace")
    servers = Stores(network.add_host("stores", addresses=2), run_folder)
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()
