-- Running jobs, set-based: the batched claim and completion, the lease
-- rescue and the heartbeat. Fenced by the attempt number. Statuses, events
-- and log levels are bound from states.TRANSITION_TABLE (%(sources)s,
-- %(target)s, %(event)s, %(level)s), never written here as literals.

-- name: claim_jobs
WITH claimed AS (
    UPDATE jobs
       SET status = %(target)s, attempts = attempts + 1, started_at = now(),
           next_retry_at = NULL, worker_id = %(worker)s,
           lease_expires_at = now() + make_interval(secs => %(lease)s)
     WHERE id = ANY(%(ids)s::uuid[]) AND status = ANY(%(sources)s)
       AND (next_retry_at IS NULL OR next_retry_at <= now())
 RETURNING id, type, queue, payload, attempts, max_attempts, enqueued_at, trace_context
), logged AS (
    INSERT INTO job_logs (job_id, created_at, level, event, message, extra)
    SELECT id, now(), %(level)s, %(event)s, 'claimed by ' || %(worker)s,
           jsonb_build_object('attempt', attempts, 'worker', %(worker)s)
      FROM claimed
)
-- waited: seconds since the job became ready (enqueued_at is its enqueue, start or retry due time).
SELECT id, type, queue, payload, attempts, max_attempts, trace_context,
       EXTRACT(EPOCH FROM now() - enqueued_at)::float8 AS waited
  FROM claimed

-- name: complete_jobs
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, attempt int, result jsonb)
), done AS (
    UPDATE jobs
       SET status = %(target)s, result = input.result, completed_at = now(),
           last_error = '', last_error_class = '', worker_id = '', lease_expires_at = NULL
      FROM input
     WHERE jobs.id = input.id AND jobs.status = ANY(%(sources)s) AND jobs.attempts = input.attempt
 RETURNING jobs.id, jobs.attempts, jobs.type, jobs.queue
), logged AS (
    INSERT INTO job_logs (job_id, created_at, level, event, message, extra)
    SELECT id, now(), %(level)s, %(event)s, '', jsonb_build_object('attempt', attempts) FROM done
)
SELECT id, type, queue FROM done

-- name: rescue_expired_leases
-- Running jobs whose lease expired (their worker stopped heartbeating),
-- oldest first: requeued after a backoff while attempts are left, else
-- failed. SKIP LOCKED lets two rescuers share the work.
UPDATE jobs
   SET status = CASE WHEN attempts < max_attempts THEN %(requeue_target)s ELSE %(fail_target)s END,
       next_retry_at = CASE WHEN attempts < max_attempts THEN now() + make_interval(secs => %(delay)s) END,
       enqueued_at = CASE WHEN attempts < max_attempts
                          THEN now() + make_interval(secs => %(delay)s) ELSE enqueued_at END,
       completed_at = CASE WHEN attempts < max_attempts THEN NULL ELSE now() END,
       last_error = %(error)s, last_error_class = %(error_class)s, worker_id = '', lease_expires_at = NULL
 WHERE id IN (SELECT id FROM jobs
               WHERE status = ANY(%(sources)s) AND lease_expires_at < now()
               ORDER BY lease_expires_at
               LIMIT %(limit)s
                 FOR UPDATE SKIP LOCKED)
RETURNING id, status, attempts, queue, priority, enqueued_at, next_retry_at, type

-- name: extend_leases
-- Heartbeat: push out the leases a worker still holds.
UPDATE jobs SET lease_expires_at = now() + make_interval(secs => %(lease)s)
  FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, attempt int)
 WHERE jobs.id = t.id AND jobs.attempts = t.attempt
   AND jobs.status = %(processing)s AND jobs.worker_id = %(worker)s
RETURNING jobs.id

