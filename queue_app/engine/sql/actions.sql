-- What users ask for: cancel and retry, each one conditional UPDATE.

-- name: cancel_job
UPDATE jobs SET status = 'cancelled', completed_at = now(), worker_id = '',
       lease_expires_at = NULL, next_retry_at = NULL
 WHERE id = %(id)s AND status IN ('queued', 'processing')
RETURNING queue

-- name: retry_job
-- Attempts are never reset (they fence stale workers): max_attempts rises instead.
UPDATE jobs SET status = 'queued', max_attempts = GREATEST(max_attempts, attempts + 1),
       next_retry_at = NULL, enqueued_at = now(), completed_at = NULL,
       result = NULL, worker_id = '', lease_expires_at = NULL
 WHERE id = %(id)s AND status IN ('failed', 'cancelled')
RETURNING queue, priority, enqueued_at
