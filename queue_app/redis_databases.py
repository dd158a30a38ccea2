"""Which Redis database a URL names: the queue's and the cache's must never be one.

Django's Redis caches empty their whole database on ``cache.clear()`` (FLUSHDB):
on the queue's database that erases every queue's ready, in-flight and retry ids
at once. So the cache gets a database of its own: unset, ``CACHE_URL`` is the
queue's server with the other database of its pair (0 and 1, 2 and 3, ... 14 and
15), and the system check queue_app.E014 stops a configuration where both name
one database (checks.py).

URLs are read as redis-py reads them (``redis://``, ``rediss://``, ``unix://``,
with the database as the path or ``?db=``). Nothing here connects: two different
names for one server (a DNS alias, a proxy) are not recognised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.connection import parse_url

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
# Names every client on the host reaches one server by.
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


@dataclass(frozen=True)
class Database:
    """One database of one Redis server: ``server`` is ``host:port`` or ``unix:<path>``."""

    server: str
    number: int

    def __str__(self) -> str:
        return f"database {self.number} of {self.server}"


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The (host, port) startup nodes of ``redis+cluster://[user:password@]host:port[,host:port...]``."""
    nodes = []
    for address in filter(None, urlsplit(url).netloc.rpartition("@")[2].split(",")):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"REDIS_URL: cluster node {address!r} must be host:port")
        nodes.append((host.strip("[]"), int(port)))
    if not nodes:
        raise ValueError("REDIS_URL: a cluster URL names at least one host:port")
    return nodes


def _server(host: str, port: int) -> str:
    host = host.lower()
    return f"{'localhost' if host in _LOOPBACK else host}:{port}"


def database(url: str) -> Database:
    """The database a plain Redis URL names (ValueError when it names none)."""
    options = parse_url(url)
    if "path" in options:
        server = f"unix:{os.path.normpath(options['path'])}"
    else:
        server = _server(options.get("host", "localhost"), int(options.get("port", 6379)))
    return Database(server, int(options.get("db", 0)))


def with_database(url: str, number: int | str) -> str:
    """``url`` naming database ``number`` of the same server."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if parts.scheme == "unix" or "db" in query:
        query["db"] = str(number)
        if parts.scheme == "unix":
            # Spelled out: urlunsplit drops the "//" of a scheme it does not know when the
            # netloc is empty, and redis-py rejects "unix:/path".
            return f"unix://{parts.netloc}{parts.path}?{urlencode(query)}"
        return urlunsplit(parts._replace(query=urlencode(query)))
    return urlunsplit(parts._replace(path=f"/{number}"))


def cache_url_beside(queue_url: str) -> str:
    """The cache's default: the queue's server, the other database of its pair (0 <-> 1, 2 <-> 3, ...)."""
    return with_database(queue_url, database(queue_url).number ^ 1)


def shared_database(cache_url: str, queue_url: str) -> Database | None:
    """The queue's database when ``cache_url`` names it too, else None.

    A Redis Cluster has database 0 only: a cache on any of its startup nodes shares it.
    A URL that does not parse shares nothing (the client refuses it where it is used).
    """
    try:
        cache = database(cache_url)
        if is_cluster_url(queue_url):
            nodes = {_server(host, port) for host, port in cluster_nodes(queue_url)}
            return Database(cache.server, 0) if cache.server in nodes else None
        queue = database(queue_url)
    except ValueError:
        return None
    return queue if queue == cache else None
