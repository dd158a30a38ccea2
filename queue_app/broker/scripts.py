"""Lua scripts run by their SHA1 (EVALSHA), never by their full text on each call.

Each script is registered once per client (redis-py's ``register_script``). A
call sends EVALSHA; when Redis answers NOSCRIPT (it restarted, failed over, or
ran SCRIPT FLUSH), redis-py loads the text and calls again. On a Redis Cluster
the call goes to the node that serves its keys, and SCRIPT LOAD to every
primary, so the same holds there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import redis
from redis.commands.core import Script

_scripts: dict[tuple[int, str], Script] = {}


def script(client: Any, source: str) -> Script:
    """The script registered once per client: calling it is an EVALSHA of a known hash."""
    registered = _scripts.get((id(client), source))
    if registered is None:
        registered = _scripts[id(client), source] = client.register_script(source)
    return registered


def sha(source: str) -> str:
    """What EVALSHA names ``source`` by."""
    return hashlib.sha1(source.encode()).hexdigest()


def run(client: Any, source: str, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
    """One call of the script on ``keys``; loads it first if Redis lost it."""
    return script(client, source)(keys=list(keys), args=list(args), client=client)


def run_many(client: Any, source: str, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]) -> list[Any]:
    """Several (keys, args) calls in one pipeline (no MULTI), in order: one round trip.

    A pipeline cannot react to NOSCRIPT between its commands, so the calls that met it
    run again, one by one, once the script is loaded: each call still runs exactly once.
    """
    loaded = script(client, source)
    pipe = client.pipeline(transaction=False)
    for keys, args in calls:
        # EVALSHA by hand: a pipeline running a Script first asks whether it exists, a round trip.
        pipe.execute_command("EVALSHA", loaded.sha, len(keys), *keys, *args)
    results = pipe.execute(raise_on_error=False)
    for index, result in enumerate(results):
        if isinstance(result, redis.exceptions.NoScriptError):
            keys, args = calls[index]
            results[index] = loaded(keys=list(keys), args=list(args), client=client)
        elif isinstance(result, Exception):
            raise result
    return results
