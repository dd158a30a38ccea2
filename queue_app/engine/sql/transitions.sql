-- The transitions, each named like its row in states.TRANSITION_TABLE and run
-- by engine.transitions, which binds the table's %(sources)s and %(target)s.
-- Each is one conditional UPDATE: no row back means the job was not in a
-- source status (or, for a running job, the attempt's fence no longer holds it)
-- and nothing changed. A running job's (fenced) transition changes one job,
-- %(id)s at %(fence)s; a transition users ask for (cancel, retry) changes the set
-- %(ids)s, one job or a batch (apply_transition_to_jobs). Every statement returns
-- the same columns, what the log row and the outbox row need, and may add an
-- eighth: a JSON object of facts its log row's extra records.

-- name: schedule_retry
-- A failed attempt with attempts left: queued again after a backoff.
UPDATE queue_app_jobs
   SET status = %(target)s, next_retry_at = now() + make_interval(secs => %(delay)s),
       enqueued_at = now() + make_interval(secs => %(delay)s), completed_at = NULL,
       last_error = %(error)s, last_error_class = %(error_class)s, last_error_traceback = %(traceback)s,
       worker_id = '', lease_expires_at = NULL
 WHERE id = %(id)s AND status = ANY(%(sources)s) AND fence = %(fence)s
   AND attempts < max_attempts
RETURNING id, status, attempts, queue, priority_value, enqueued_at, next_retry_at

-- name: fail
-- A failed attempt that is not retried: failed for good.
UPDATE queue_app_jobs
   SET status = %(target)s, next_retry_at = NULL, completed_at = now(),
       last_error = %(error)s, last_error_class = %(error_class)s, last_error_traceback = %(traceback)s,
       worker_id = '', lease_expires_at = NULL
 WHERE id = %(id)s AND status = ANY(%(sources)s) AND fence = %(fence)s
RETURNING id, status, attempts, queue, priority_value, enqueued_at, next_retry_at

-- name: hand_back
-- A clean shutdown returns a running job unrun: the attempt is not counted;
-- the fence stays, so the next claim's token is above every earlier one.
UPDATE queue_app_jobs SET status = %(target)s, attempts = attempts - 1, worker_id = '',
       lease_expires_at = NULL, started_at = NULL
 WHERE id = %(id)s AND status = ANY(%(sources)s) AND fence = %(fence)s AND worker_id = %(worker)s
-- attempts + 1: the attempt handed back, which its log row names.
RETURNING id, status, attempts + 1, queue, priority_value, enqueued_at, next_retry_at

-- name: snooze
-- The handler asked to wait (it raised Snooze): queued again, due after the seconds it
-- asked for, its attempt taken back (as a hand-back's) and counted as a snooze, while the
-- job has snoozed fewer than %(max_snoozes)s times. The fence stays, as for a hand-back.
UPDATE queue_app_jobs
   SET status = %(target)s, attempts = attempts - 1, snoozes = snoozes + 1,
       next_retry_at = now() + make_interval(secs => %(delay)s),
       enqueued_at = now() + make_interval(secs => %(delay)s),
       worker_id = '', lease_expires_at = NULL
 WHERE id = %(id)s AND status = ANY(%(sources)s) AND fence = %(fence)s AND snoozes < %(max_snoozes)s
-- attempts + 1: the attempt that snoozed, which its log row names; snoozes: the count so far.
RETURNING id, status, attempts + 1, queue, priority_value, enqueued_at, next_retry_at, snoozes

-- name: cancel
-- A job no worker runs: cancelled at once.
UPDATE queue_app_jobs SET status = %(target)s, completed_at = now(), worker_id = '',
       lease_expires_at = NULL, next_retry_at = NULL
 WHERE id = ANY(%(ids)s::uuid[]) AND status = ANY(%(sources)s)
RETURNING id, status, attempts, queue, priority_value, enqueued_at, next_retry_at

-- name: request_cancel
-- A running job: asked to cancel. Its worker is told at once by the NOTIFY, which
-- PostgreSQL delivers at commit ("<id> <fence>": the attempt meant), and stops the
-- attempt; until it confirms, the job keeps its lease and no retry can be claimed.
WITH asked AS (
    UPDATE queue_app_jobs SET status = %(target)s
     WHERE id = ANY(%(ids)s::uuid[]) AND status = ANY(%(sources)s)
    RETURNING id, status, attempts, queue, priority_value, enqueued_at, next_retry_at, fence
)
SELECT id, status, attempts, queue, priority_value, enqueued_at, next_retry_at
  FROM asked, LATERAL (SELECT pg_notify('jobqueue_cancel', asked.id::text || ' ' || asked.fence::text)) AS told

-- name: confirm_cancel
-- The worker stopped the attempt the cancel was asked of (its fence): cancelled now.
UPDATE queue_app_jobs SET status = %(target)s, completed_at = now(), worker_id = '',
       lease_expires_at = NULL, next_retry_at = NULL
 WHERE id = %(id)s AND status = ANY(%(sources)s) AND fence = %(fence)s
RETURNING id, status, attempts, queue, priority_value, enqueued_at, next_retry_at

-- name: request_retry
-- A retry of a job still cancelling: kept until the cancel is confirmed.
UPDATE queue_app_jobs SET retry_requested = true
 WHERE id = ANY(%(ids)s::uuid[]) AND status = ANY(%(sources)s)
RETURNING id, status, attempts, queue, priority_value, enqueued_at, next_retry_at

-- name: retry
-- Attempts are never reset (they number the attempts in the job's log): max_attempts rises instead,
-- to one more than the attempts made, and the log row records it before and after.
-- "before" locks the rows first, so it reads the value this UPDATE replaces.
UPDATE queue_app_jobs SET status = %(target)s, max_attempts = GREATEST(queue_app_jobs.max_attempts, queue_app_jobs.attempts + 1),
       next_retry_at = NULL, enqueued_at = now(), completed_at = NULL,
       result = NULL, worker_id = '', lease_expires_at = NULL, retry_requested = false
  FROM (SELECT id, max_attempts FROM queue_app_jobs
         WHERE id = ANY(%(ids)s::uuid[]) AND status = ANY(%(sources)s)
           FOR UPDATE) AS before
 WHERE queue_app_jobs.id = before.id AND queue_app_jobs.status = ANY(%(sources)s)
RETURNING queue_app_jobs.id, queue_app_jobs.status, queue_app_jobs.attempts, queue_app_jobs.queue, queue_app_jobs.priority_value, queue_app_jobs.enqueued_at,
          queue_app_jobs.next_retry_at,
          jsonb_build_object('max_attempts_before', before.max_attempts, 'max_attempts', queue_app_jobs.max_attempts)

-- name: resume
-- A failed or cancelled job with dependencies goes back to waiting (a retried workflow's
-- steps whose dependencies have yet to complete); one more attempt is allowed, as a retry does.
UPDATE queue_app_jobs SET status = %(target)s, max_attempts = GREATEST(queue_app_jobs.max_attempts, queue_app_jobs.attempts + 1),
       next_retry_at = NULL, completed_at = NULL, result = NULL, last_error = '', last_error_class = '',
       worker_id = '', lease_expires_at = NULL, retry_requested = false
 WHERE id = ANY(%(ids)s::uuid[]) AND status = ANY(%(sources)s)
   AND EXISTS (SELECT FROM queue_app_job_waits w WHERE w.job_id = queue_app_jobs.id)
RETURNING id, status, attempts, queue, priority_value, enqueued_at, next_retry_at
