-- Running jobs, set-based: the batched claim and completion, the lease
-- rescue and the heartbeat. Fenced by queue_app_jobs.fence (+1 per claim, never lowered). The
-- transitions' statuses, events and log levels are bound from states.TRANSITION_TABLE
-- (%(sources)s, %(target)s, %(event)s, %(level)s). The literal statuses left are no
-- transition's: mark_started's guard, and expire_queued_jobs' condition of its index.

-- name: claim_jobs
-- The queue locks, then the compare-and-set claim, in one call: the function
-- queue_claim_jobs_v5 (schema/claim_v5.sql), which falls back to the claim with
-- queue and key controls and expiry, queue_claim_controlled_jobs_v5 (same file).
-- Returns the claimed jobs (claimed = true) and the queued, due ids the queue
-- controls held back (claimed = false), which the caller puts back in place.
SELECT id, type, queue, payload, attempts, max_attempts, fence, claimed, trace_context, waited
  FROM queue_claim_jobs_v5(%(ids)s::uuid[], %(worker)s, %(lease)s, %(queues)s::text[], %(exclusive)s::boolean[],
                           %(lock_class)s, %(sources)s::text[], %(target)s, %(event)s, %(level)s,
                           %(expire_target)s, %(expire_event)s, %(expire_level)s)

-- name: complete_jobs
-- Primary-key look-ups of the given ids, whatever the statistics say (as in the
-- claim): joined to the input rows alone, the jobs could be planned as a scan of
-- every job or a hash of every processing one, to complete a few.
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, fence bigint, result jsonb)
), done AS (
    UPDATE queue_app_jobs
       SET status = %(target)s, result = input.result, completed_at = now(),
           last_error = '', last_error_class = '', last_error_traceback = '', worker_id = '', lease_expires_at = NULL
      FROM input
     WHERE queue_app_jobs.id = ANY(ARRAY(SELECT input.id FROM input)) AND queue_app_jobs.id = input.id
       AND queue_app_jobs.status || '' = ANY(%(sources)s) AND queue_app_jobs.fence = input.fence
 RETURNING queue_app_jobs.id, queue_app_jobs.attempts, queue_app_jobs.type, queue_app_jobs.queue
), logged AS (
    INSERT INTO queue_app_job_logs (job_id, created_at, level, event, message, extra)
    SELECT id, now(), %(level)s, %(event)s, '', jsonb_build_object('attempt', attempts) FROM done
)
SELECT id, type, queue FROM done

-- name: lock_expired_leases
-- Running jobs whose lease expired (their worker stopped heartbeating),
-- oldest first, locked for rescue_expired_leases in the same transaction.
-- SKIP LOCKED lets two rescuers share the work. %(queues)s NULL: every
-- queue (the reconciler); else those queues only (their maintenance leader).
SELECT id, type, attempts
  FROM queue_app_jobs
 WHERE status = ANY(%(sources)s) AND lease_expires_at < now()
   AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
 ORDER BY lease_expires_at
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: rescue_expired_leases
-- The jobs lock_expired_leases locked: requeued after their delay (the
-- handler's backoff, drawn per job) while attempts are left, else failed.
-- By primary key (see complete_jobs).
WITH expired AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, delay float8)
)
UPDATE queue_app_jobs
   SET status = CASE WHEN attempts < max_attempts THEN %(requeue_target)s ELSE %(fail_target)s END,
       next_retry_at = CASE WHEN attempts < max_attempts THEN now() + make_interval(secs => expired.delay) END,
       enqueued_at = CASE WHEN attempts < max_attempts
                          THEN now() + make_interval(secs => expired.delay) ELSE enqueued_at END,
       completed_at = CASE WHEN attempts < max_attempts THEN NULL ELSE now() END,
       last_error = %(error)s, last_error_class = %(error_class)s, last_error_traceback = '',
       worker_id = '', lease_expires_at = NULL
  FROM expired
 WHERE queue_app_jobs.id = ANY(ARRAY(SELECT expired.id FROM expired)) AND queue_app_jobs.id = expired.id
RETURNING queue_app_jobs.id, status, attempts, queue, priority_value, enqueued_at, next_retry_at, type

-- name: confirm_cancels
-- Attempts that ended while their job was cancelling: whatever the handler did, the
-- job is cancelled (a completion or failure the fence turned away lands here).
-- Returns retry_requested: a retry asked for meanwhile is applied next, in this transaction.
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, fence bigint)
)
UPDATE queue_app_jobs SET status = %(target)s, completed_at = now(), worker_id = '',
       lease_expires_at = NULL, next_retry_at = NULL
  FROM input
 WHERE queue_app_jobs.id = ANY(ARRAY(SELECT input.id FROM input)) AND queue_app_jobs.id = input.id
   AND queue_app_jobs.status || '' = ANY(%(sources)s) AND queue_app_jobs.fence = input.fence
RETURNING queue_app_jobs.id, queue_app_jobs.status, queue_app_jobs.attempts, queue_app_jobs.queue, queue_app_jobs.priority_value, queue_app_jobs.enqueued_at,
          queue_app_jobs.next_retry_at, queue_app_jobs.retry_requested

-- name: rescue_cancelling
-- Jobs asked to cancel whose worker stopped heartbeating: nothing runs them any more,
-- so the cancel stands. %(queues)s as in rescue_expired_leases.
UPDATE queue_app_jobs SET status = %(target)s, completed_at = now(), worker_id = '',
       lease_expires_at = NULL, next_retry_at = NULL
 WHERE id IN (SELECT id FROM queue_app_jobs
               WHERE status = ANY(%(sources)s) AND lease_expires_at < now()
                 AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
               ORDER BY lease_expires_at
               LIMIT %(limit)s
                 FOR UPDATE SKIP LOCKED)
RETURNING id, status, attempts, queue, priority_value, enqueued_at, next_retry_at, retry_requested

-- name: extend_leases
-- Heartbeat: push out the leases a worker still holds, and say which of them were
-- asked to cancel meanwhile (the push may have been missed). By primary key (see complete_jobs).
WITH held AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, fence bigint)
)
UPDATE queue_app_jobs SET lease_expires_at = now() + make_interval(secs => %(lease)s)
  FROM held
 WHERE queue_app_jobs.id = ANY(ARRAY(SELECT held.id FROM held)) AND queue_app_jobs.id = held.id AND queue_app_jobs.fence = held.fence
   AND queue_app_jobs.status || '' = ANY(%(running)s) AND queue_app_jobs.worker_id = %(worker)s
RETURNING queue_app_jobs.id, queue_app_jobs.status


-- name: mark_started
-- A claimed job that starts noticeably after its claim: started_at is its start.
UPDATE queue_app_jobs SET started_at = now()
 WHERE id = %(id)s AND status = 'processing' AND fence = %(fence)s

-- name: listen_cancel
-- A worker hears the cancels of running jobs (request_cancel notifies "<id> <fence>").
LISTEN jobqueue_cancel

-- name: release_stalled_keys
-- Keys with parked jobs and none in line get their next turn: the function
-- queue_release_stalled_keys_v2 (schema/claim_v5.sql). Returns how many jobs it unparked.
SELECT queue_release_stalled_keys_v2(%(queues)s::text[], %(lock_class)s, %(limit)s)

-- name: expire_queued_jobs
-- Queued jobs past their expiry that no claim has met (their ids not popped, or not in
-- Redis at all), oldest expiry first: settled as expired. SKIP LOCKED: a claim or a cancel
-- holding a row settles it itself. %(queues)s NULL: every queue; else those queues only.
-- The literal status and expiry test are the condition of idx_jobs_queued_expiry.
WITH due AS (
    SELECT id
      FROM queue_app_jobs
     WHERE status = 'queued' AND expires_at IS NOT NULL AND expires_at <= now()
       AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
     ORDER BY expires_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE queue_app_jobs SET status = %(target)s, completed_at = now(), next_retry_at = NULL
  FROM due
 WHERE queue_app_jobs.id = due.id AND queue_app_jobs.status = ANY(%(sources)s)
RETURNING queue_app_jobs.id, queue_app_jobs.status, queue_app_jobs.attempts, queue_app_jobs.queue, queue_app_jobs.priority_value, queue_app_jobs.enqueued_at,
          queue_app_jobs.next_retry_at, jsonb_build_object('expires_at', queue_app_jobs.expires_at)
