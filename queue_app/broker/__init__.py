"""The Redis layout, in one place: keys, scores, push, pop and promote. No ORM here.

Per queue, with a hash tag so one queue's keys share a Redis Cluster slot, each key
after JOBQUEUE['REDIS_KEY_PREFIX'] (empty by default):

    queue:{name}:priority         sorted set of ready ids; score = -priority (-100..100),
                                  member = "<16-digit µs since 2020>:<id>", so equal
                                  scores pop in enqueue order (see ``scores``)
    queue:{name}:fifo             list of ready ids (queues configured as strict FIFO)
    queue:{name}:retry            sorted set of waiting ids; score = due epoch seconds
    queue:{name}:inflight         sorted set of popped, not yet acknowledged ids;
                                  score = the epoch second they go back to ready (FIFO
                                  ids a µs apart, rising in pop order)
    queue:{name}:inflight:places  hash: popped id -> "<score> <member>" (to put it back in place)
    queue:{name}:wake             list of at most one token: pushed when ids arrive, so an
                                  idle worker blocks on it (BLPOP) instead of polling

A pop (``reserve``) is never the only copy of an id: one script moves the ids
from the ready structure into the in-flight set with a deadline; the worker
acknowledges them once its claim has committed. A worker that dies in between
leaves them there, and the next sweep (``return_expired``, run by the queue's
maintenance leader with its promotion) puts them back where they were.

Redis holds ids only; losing it loses the schedule, never the work.

Modules: ``keys`` (names), ``scores`` (exact float64 scores), ``client`` (one
client per process, plain or cluster), ``scripts`` (Lua scripts run by their SHA,
reloaded when Redis lost them), ``push`` (just-committed jobs made ready
without waiting for the answer), ``ready`` (apply intents, pop into flight, acknowledge,
return expired ids, wait, promote, depths), ``repair`` (the reconciler's look-ups,
scans and restores), ``fifo_prune`` (the reconciler's rebuild of a FIFO list without
its stale ids). Callers use the names re-exported here: ``broker.apply``,
``broker.priority_key``, ...
"""

from queue_app.broker.client import REDIS_ERRORS, connect, get_client, is_cluster, is_cluster_url
from queue_app.broker.fifo_prune import prune_list
from queue_app.broker.keys import (
    RECONCILE_KEY_TTL_SECONDS,
    all_keys_pattern,
    fifo_key,
    inflight_key,
    inflight_places_key,
    key_prefix,
    priority_key,
    ready_key,
    reconcile_members_key,
    reconcile_rebuild_key,
    reconcile_rebuild_lock_key,
    reconcile_restored_key,
    reconcile_staging_key,
    reconcile_stale_key,
    retry_key,
    wake_key,
)
from queue_app.broker.push import send_ready
from queue_app.broker.ready import (
    INFLIGHT_SECONDS,
    Intent,
    acknowledge,
    apply,
    depths,
    push_ready,
    put_back,
    ready_heads,
    reserve,
    return_expired,
    take_due,
    wait_and_reserve,
    wait_for_work,
    wake,
)
from queue_app.broker.repair import (
    Lookup,
    contains,
    discard_reconcile_keys,
    prune_sorted_set,
    release_staged,
    restore,
    scan_sorted_set,
    snapshot_list,
)
from queue_app.broker.scores import (
    EPOCH,
    LATEST_EXACT_TIME,
    due_score,
    enqueue_order_score,
    member_job_id,
    ready_member,
    ready_score,
)

__all__ = [
    "EPOCH",
    "INFLIGHT_SECONDS",
    "LATEST_EXACT_TIME",
    "RECONCILE_KEY_TTL_SECONDS",
    "REDIS_ERRORS",
    "Intent",
    "Lookup",
    "acknowledge",
    "all_keys_pattern",
    "apply",
    "push_ready",
    "send_ready",
    "connect",
    "contains",
    "depths",
    "discard_reconcile_keys",
    "due_score",
    "enqueue_order_score",
    "fifo_key",
    "inflight_key",
    "inflight_places_key",
    "key_prefix",
    "member_job_id",
    "get_client",
    "is_cluster",
    "is_cluster_url",
    "priority_key",
    "prune_list",
    "prune_sorted_set",
    "put_back",
    "ready_heads",
    "ready_key",
    "ready_member",
    "ready_score",
    "reconcile_members_key",
    "reconcile_rebuild_key",
    "reconcile_rebuild_lock_key",
    "reconcile_restored_key",
    "reconcile_staging_key",
    "reconcile_stale_key",
    "release_staged",
    "reserve",
    "return_expired",
    "restore",
    "retry_key",
    "scan_sorted_set",
    "snapshot_list",
    "take_due",
    "wait_and_reserve",
    "wait_for_work",
    "wake",
    "wake_key",
]
