-- Running jobs: claim, complete, fail, lease. Fenced by the attempt number.

-- name: claim_jobs
WITH claimed AS (
    UPDATE jobs
       SET status = 'processing', attempts = attempts + 1, started_at = now(),
           next_retry_at = NULL, worker_id = %(worker)s,
           lease_expires_at = now() + make_interval(secs => %(lease)s)
     WHERE id = ANY(%(ids)s::uuid[]) AND status = 'queued'
       AND (next_retry_at IS NULL OR next_retry_at <= now())
 RETURNING id, type, queue, payload, attempts, max_attempts
), logged AS (
    INSERT INTO job_logs (job_id, created_at, level, event, message, extra)
    SELECT id, now(), 'info', 'claimed', 'claimed by ' || %(worker)s,
           jsonb_build_object('attempt', attempts, 'worker', %(worker)s)
      FROM claimed
)
SELECT id, type, queue, payload, attempts, max_attempts FROM claimed

-- name: complete_jobs
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, attempt int, result jsonb)
), done AS (
    UPDATE jobs
       SET status = 'completed', result = input.result, completed_at = now(),
           last_error = '', worker_id = '', lease_expires_at = NULL
      FROM input
     WHERE jobs.id = input.id AND jobs.status = 'processing' AND jobs.attempts = input.attempt
 RETURNING jobs.id, jobs.attempts
), logged AS (
    INSERT INTO job_logs (job_id, created_at, level, event, message, extra)
    SELECT id, now(), 'info', 'completed', '', jsonb_build_object('attempt', attempts) FROM done
)
SELECT id FROM done

-- name: settle_failed_attempt
-- A failed attempt: back to queued after a backoff while attempts are left
-- (and the caller allows a retry), else failed. Fenced by the attempt number.
UPDATE jobs
   SET status = CASE WHEN %(retry)s AND attempts < max_attempts THEN 'queued' ELSE 'failed' END,
       next_retry_at = CASE WHEN %(retry)s AND attempts < max_attempts
                            THEN now() + make_interval(secs => %(delay)s) END,
       enqueued_at = CASE WHEN %(retry)s AND attempts < max_attempts
                          THEN now() + make_interval(secs => %(delay)s) ELSE enqueued_at END,
       completed_at = CASE WHEN %(retry)s AND attempts < max_attempts THEN NULL ELSE now() END,
       last_error = %(error)s, worker_id = '', lease_expires_at = NULL
 WHERE id = %(id)s AND status = 'processing' AND attempts = %(attempt)s
RETURNING id, status, attempts, queue, next_retry_at

-- name: rescue_expired_leases
-- The same settlement for running jobs whose lease expired (their worker
-- stopped heartbeating), oldest first; SKIP LOCKED lets two rescuers share.
UPDATE jobs
   SET status = CASE WHEN %(retry)s AND attempts < max_attempts THEN 'queued' ELSE 'failed' END,
       next_retry_at = CASE WHEN %(retry)s AND attempts < max_attempts
                            THEN now() + make_interval(secs => %(delay)s) END,
       enqueued_at = CASE WHEN %(retry)s AND attempts < max_attempts
                          THEN now() + make_interval(secs => %(delay)s) ELSE enqueued_at END,
       completed_at = CASE WHEN %(retry)s AND attempts < max_attempts THEN NULL ELSE now() END,
       last_error = %(error)s, worker_id = '', lease_expires_at = NULL
 WHERE id IN (SELECT id FROM jobs
               WHERE status = 'processing' AND lease_expires_at < now()
               ORDER BY lease_expires_at
               LIMIT %(limit)s
                 FOR UPDATE SKIP LOCKED)
RETURNING id, status, attempts, queue, next_retry_at

-- name: extend_leases
-- Heartbeat: push out the leases a worker still holds.
UPDATE jobs SET lease_expires_at = now() + make_interval(secs => %(lease)s)
  FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, attempt int)
 WHERE jobs.id = t.id AND jobs.attempts = t.attempt
   AND jobs.status = 'processing' AND jobs.worker_id = %(worker)s
RETURNING jobs.id

-- name: hand_back_job
-- A clean shutdown returns a running job unrun: the attempt is not counted.
UPDATE jobs SET status = 'queued', attempts = attempts - 1, worker_id = '',
       lease_expires_at = NULL, started_at = NULL
 WHERE id = %(id)s AND status = 'processing' AND attempts = %(attempt)s AND worker_id = %(worker)s
RETURNING id, queue, priority, enqueued_at
