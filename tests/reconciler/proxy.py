"""A TCP forwarder that tests can cut and restore, to make a real store unreachable.

The target is (host, port) or a Unix socket path, so it works with the machine's
servers and with the embedded ones; ``postgres_via`` / ``redis_via`` give a
child process the store's URL through the proxy.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import parse_qs, urlsplit


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; nothing listens until ``start()``.

    ``stop()`` closes the listener and every open connection, so clients see
    both a reset of their current connection and refused new ones: an outage.
    ``freeze()`` keeps every connection open but carries no byte until ``thaw()``:
    a partition, where requests go unanswered instead of failing.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                upstream = _connect(self.target)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    # stop() came while this connection was being set up: it must not
                    # outlive the outage (stop() clears the listener before the sockets).
                    client.close()
                    upstream.close()
                    return
                self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self._flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def _connect(target: tuple[str, int] | str) -> socket.socket:
    if isinstance(target, str):
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.settimeout(5)
        upstream.connect(target)
    else:
        upstream = socket.create_connection(target, timeout=5)
    return upstream


def postgres_proxy(settings_dict: dict) -> TcpProxy:
    """A proxy in front of the database Django is connected to."""
    host, port = settings_dict.get("HOST") or "127.0.0.1", int(settings_dict.get("PORT") or 5432)
    return TcpProxy(f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port))


def postgres_via(settings_dict: dict, proxy: TcpProxy) -> str:
    return f"postgres://{settings_dict['USER']}@127.0.0.1:{proxy.port}/{settings_dict['NAME']}"


def redis_proxy(url: str) -> TcpProxy:
    parts = urlsplit(url)
    return TcpProxy(parts.path if parts.scheme == "unix" else (parts.hostname, parts.port or 6379))


def redis_via(url: str, proxy: TcpProxy) -> str:
    parts = urlsplit(url)
    db = (
        parse_qs(parts.query).get("db", ["0"])[0] if parts.scheme == "unix" else parts.path.lstrip("/") or "0"
    )
    return f"redis://127.0.0.1:{proxy.port}/{db}"
