-- The outbox's wake-up channel and its upkeep. The channel name lives here
-- and in enqueue.sql (whose statements notify as they insert): transitions
-- notify on it, the relay listens on it.

-- name: notify_relay
-- Delivered only when the surrounding transaction commits.
SELECT pg_notify('jobqueue_outbox', '')

-- name: lock_dispatch
-- Held by a relay for its batch's transaction: relays take turns, so batches reach
-- Redis in outbox order (two relays applying theirs at once could put a FIFO queue's
-- jobs out of order, or apply a job's removal after the enqueue that followed it).
SELECT pg_advisory_xact_lock(%(lock_class)s, 0)

-- name: listen_outbox
LISTEN jobqueue_outbox

-- name: prune_outbox
-- One chunk of dispatched rows older than the retention, oldest first: a range of
-- idx_outbox_dispatched_at, then a primary-key probe per row. (With "id IN (subquery)"
-- the planner joins the chunk to a full scan of the outbox.)
DELETE FROM job_outbox WHERE id = ANY(ARRAY(
    SELECT id FROM job_outbox
     WHERE dispatched_at < now() - make_interval(secs => %(retention)s)
     ORDER BY dispatched_at
     LIMIT %(limit)s))
