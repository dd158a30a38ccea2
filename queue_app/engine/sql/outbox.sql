-- The outbox's wake-up channel and its upkeep. The channel name lives only
-- here: services notify on it, the relay listens on it.

-- name: notify_relay
-- Delivered only when the surrounding transaction commits.
SELECT pg_notify('jobqueue_outbox', '')

-- name: listen_outbox
LISTEN jobqueue_outbox

-- name: prune_outbox
-- One chunk of dispatched rows older than the retention.
DELETE FROM job_outbox WHERE id IN (
    SELECT id FROM job_outbox
     WHERE dispatched_at < now() - make_interval(secs => %(retention)s)
     LIMIT %(limit)s)
