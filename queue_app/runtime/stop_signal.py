"""A stop request that a signal handler can make and a sleeping loop wakes on at once.

Python runs a signal handler in the main thread between two bytecodes, possibly
while that thread holds a lock. ``threading.Event.set`` takes the Event's lock,
so a SIGTERM that lands while the main thread is inside ``Event.wait``'s locked
section blocks the handler for ever, and the process never stops (Python's
``signal`` documentation: locks must not be used in handlers). Here ``set``
takes no lock: it sets an attribute and writes a byte to a socket pair, and
``wait`` sleeps in ``select`` on the other end, which that byte wakes.
"""

from __future__ import annotations

import select
import socket


class StopSignal:
    """``set`` (safe in a signal handler), ``is_set``, and ``wait(timeout)`` cut short by ``set``."""

    def __init__(self) -> None:
        self._stopped = False
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_writer.setblocking(False)

    def set(self) -> None:
        self._stopped = True
        try:
            self._wake_writer.send(b"\0")
        except OSError:
            pass  # the buffer is full of earlier wake-ups: the reader is awake anyway

    def is_set(self) -> bool:
        return self._stopped

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds or until stopped; True once stopped."""
        if not self._stopped:
            # A set() between the check and select() has written its byte: no sleep then.
            select.select([self._wake_reader], [], [], max(timeout, 0))
        return self._stopped
