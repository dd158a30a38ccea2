"""A private network of hosts made of Linux network namespaces, and cutting links in it.

Each host is a network namespace with one veth link to a bridge that lives in a
namespace of its own (the switch), so nothing is added to the machine's own
network: no interface, address or route outside the namespaces this creates,
and every name carries the creating process's id. A host may hold several
addresses (the stores' host has one per service, so a route can cut one service
and not the other).

Cuts drop packets in both directions, silently, as a network partition does:
the cut host sends to the far address through a gateway that does not exist
(a neighbour entry with a MAC address no port has, so the bridge floods the
frames and every host ignores them), and the far host sends its replies from
that address the same way (a policy rule on the source address). Neither side
gets an error: open connections wait, new ones time out. A whole host is cut by
taking its switch port down.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

SUBNET = "10.77.0"
PREFIX = 24
# An address on the subnet that no host has, and a MAC address no port has: the way to nowhere.
NOWHERE = f"{SUBNET}.254"
NOWHERE_MAC = "02:00:00:00:00:fe"
# The routing table each cut source address is sent through, by a rule on that address.
CUT_TABLE_BASE = 100
_TO_NOWHERE = ("via", NOWHERE, "dev", "eth0", "onlink")
_PERMANENT = ("dev", "eth0", "nud", "permanent")


class NamespacesUnavailable(Exception):
    """This machine (or this user) cannot create network namespaces."""


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def why_unavailable() -> str | None:
    """Why this process cannot build the network (a reason to skip), or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    return None


@dataclass
class Host:
    name: str  # the role, e.g. "stores"
    namespace: str
    addresses: list[str]
    port: str  # its link's end in the switch

    @property
    def address(self) -> str:
        return self.addresses[0]

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


class Network:
    """Hosts on one bridge; ``close`` removes every namespace, and with them their links."""

    def __init__(self, tag: str | None = None) -> None:
        self.tag = tag or str(os.getpid())
        self.switch = f"jq-switch-{self.tag}"
        self.hosts: dict[str, Host] = {}
        self._namespaces: list[str] = []
        self._next_address = 2

    def _add_namespace(self, name: str) -> None:
        try:
            _ip("netns", "add", name)
        except RuntimeError as exc:
            raise NamespacesUnavailable(str(exc)) from exc
        self._namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def start(self) -> None:
        self._add_namespace(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")

    def add_host(self, name: str, addresses: int = 1) -> Host:
        namespace = f"jq-{name}-{self.tag}"
        port = f"p-{name}"[:15]
        self._add_namespace(namespace)
        # Both ends are made inside their namespaces: no name is ever taken in the machine's own.
        peer = ("peer", "name", port, "netns", self.switch)
        _ip("link", "add", "eth0", "netns", namespace, "type", "veth", *peer)
        _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        host = Host(name, namespace, [], port)
        for _ in range(addresses):
            address = f"{SUBNET}.{self._next_address}"
            self._next_address += 1
            _ip("-n", namespace, "addr", "add", f"{address}/{PREFIX}", "dev", "eth0")
            host.addresses.append(address)
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "neigh", "add", NOWHERE, "lladdr", NOWHERE_MAC, *_PERMANENT)
        self.hosts[name] = host
        return host

    def cut(self, host: Host, far: Host, far_address: str) -> None:
        """Drop every packet between ``host`` and ``far_address`` (an address of ``far``)."""
        # The host's packets to the address leave for nowhere.
        _ip("-n", host.namespace, "route", "add", f"{far_address}/32", *_TO_NOWHERE)
        # The far side's packets from that address to the host, too.
        table = str(CUT_TABLE_BASE + far.addresses.index(far_address))
        _ip("-n", far.namespace, "route", "replace", "default", *_TO_NOWHERE, "table", table)
        _ip("-n", far.namespace, "rule", "add", "from", far_address, "to", host.address, "table", table)

    def heal(self, host: Host, far: Host, far_address: str) -> None:
        _ip("-n", host.namespace, "route", "del", f"{far_address}/32")
        table = str(CUT_TABLE_BASE + far.addresses.index(far_address))
        _ip("-n", far.namespace, "rule", "del", "from", far_address, "to", host.address, "table", table)

    def unplug(self, host: Host) -> None:
        """Take the host's switch port down: nothing reaches it, nothing leaves it."""
        _ip("-n", self.switch, "link", "set", host.port, "down")

    def plug(self, host: Host) -> None:
        _ip("-n", self.switch, "link", "set", host.port, "up")

    def close(self) -> None:
        """Delete the namespaces (their veth links go with them); errors are collected, not raised
        half-way, so one failure leaves no other namespace behind."""
        errors = []
        for name in reversed(self._namespaces):
            try:
                _ip("netns", "del", name)
            except RuntimeError as exc:
                errors.append(str(exc))
        self._namespaces.clear()
        if errors:
            raise RuntimeError("; ".join(errors))
