-- Running jobs, set-based: the batched claim and completion, the lease
-- rescue and the heartbeat. Fenced by jobs.fence (+1 per claim, never lowered). Statuses, events
-- and log levels are bound from states.TRANSITION_TABLE (%(sources)s,
-- %(target)s, %(event)s, %(level)s), never written here as literals.

-- name: claim_jobs
-- The queue locks, then the compare-and-set claim, in one call: the function
-- queue_claim_jobs_v3 (schema/claim_v3.sql), which falls back to the claim with
-- queue controls, queue_claim_controlled_jobs_v3 (same file).
-- Returns the claimed jobs (claimed = true) and the queued, due ids the queue
-- controls held back (claimed = false), which the caller puts back in place.
SELECT id, type, queue, payload, attempts, max_attempts, fence, claimed, trace_context, waited
  FROM queue_claim_jobs_v3(%(ids)s::uuid[], %(worker)s, %(lease)s, %(queues)s::text[], %(exclusive)s::boolean[],
                           %(lock_class)s, %(sources)s::text[], %(target)s, %(event)s, %(level)s)

-- name: complete_jobs
-- Primary-key look-ups of the given ids, whatever the statistics say (as in the
-- claim): joined to the input rows alone, the jobs could be planned as a scan of
-- every job or a hash of every processing one, to complete a few.
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, fence bigint, result jsonb)
), done AS (
    UPDATE jobs
       SET status = %(target)s, result = input.result, completed_at = now(),
           last_error = '', last_error_class = '', last_error_traceback = '', worker_id = '', lease_expires_at = NULL
      FROM input
     WHERE jobs.id = ANY(ARRAY(SELECT input.id FROM input)) AND jobs.id = input.id
       AND jobs.status || '' = ANY(%(sources)s) AND jobs.fence = input.fence
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
       last_error = %(error)s, last_error_class = %(error_class)s, last_error_traceback = '',
       worker_id = '', lease_expires_at = NULL
 WHERE id IN (SELECT id FROM jobs
               WHERE status = ANY(%(sources)s) AND lease_expires_at < now()
               ORDER BY lease_expires_at
               LIMIT %(limit)s
                 FOR UPDATE SKIP LOCKED)
RETURNING id, status, attempts, queue, priority_value, enqueued_at, next_retry_at, type

-- name: extend_leases
-- Heartbeat: push out the leases a worker still holds. By primary key (see complete_jobs).
WITH held AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, fence bigint)
)
UPDATE jobs SET lease_expires_at = now() + make_interval(secs => %(lease)s)
  FROM held
 WHERE jobs.id = ANY(ARRAY(SELECT held.id FROM held)) AND jobs.id = held.id AND jobs.fence = held.fence
   AND jobs.status || '' = %(processing)s AND jobs.worker_id = %(worker)s
RETURNING jobs.id


-- name: mark_started
-- A claimed job that starts noticeably after its claim: started_at is its start.
UPDATE jobs SET started_at = now()
 WHERE id = %(id)s AND status = 'processing' AND fence = %(fence)s
