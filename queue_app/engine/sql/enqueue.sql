-- Creating jobs: one statement writes every job of a call, its `enqueued`
-- log row and its outbox row, and wakes the relays (NOTIFY is delivered
-- when the statement's transaction commits). One round trip per call: in
-- autocommit the statement is its own transaction; inside the caller's
-- transaction it joins it and commits (or rolls back) with it.
--
-- A "waiting" job (it has dependencies) is inserted waiting, with no outbox row: the
-- settle of its last dependency releases it (engine/sql/schema/workflows_v2.sql).
--
-- A "direct" job is one the caller pushes to Redis itself after the commit
-- (DISPATCH_ON_COMMIT): its outbox row waits RELAY_GRACE_SECONDS
-- (dispatch_after) before the relay looks at it, and it wakes no relay.

-- name: lock_keys
-- The advisory locks of the concurrency keys a call enqueues to (class QUEUE_LOCK_CLASS + 1,
-- as the claim in schema/claim_v5.sql tries them), in hash order so two calls never
-- deadlock. Held to the end of the transaction: whether a job parks behind its key's job
-- in line is decided, and written, before a claim can give the key its next turn.
SELECT pg_advisory_xact_lock(%(lock_class)s, k.h)
  FROM (SELECT DISTINCT hashtext(t.queue || '/' || t.key) AS h
          FROM unnest(%(queues)s::text[], %(keys)s::text[]) AS t(queue, key)) AS k
 ORDER BY k.h

-- name: keys_in_line
-- Of the given (queue, key) pairs, those with a job in line (queued, ready, not parked):
-- a new job of such a key parks behind it. The literal status is the condition of
-- idx_jobs_queued_key.
SELECT DISTINCT queue_app_jobs.queue, queue_app_jobs.concurrency_key
  FROM unnest(%(queues)s::text[], %(keys)s::text[]) AS t(queue, key)
  JOIN queue_app_jobs ON queue_app_jobs.queue = t.queue AND queue_app_jobs.concurrency_key = t.key
 WHERE queue_app_jobs.status = 'queued' AND NOT queue_app_jobs.parked AND queue_app_jobs.concurrency_key IS NOT NULL
   AND (queue_app_jobs.next_retry_at IS NULL OR queue_app_jobs.next_retry_at <= now())

-- name: insert_job
-- One job: the same rows as insert_jobs, planned much faster than its arrays.
-- A key its owner already used (jobs without an owner share one scope) inserts
-- nothing (the caller looks the job up).
WITH job AS (
    INSERT INTO queue_app_jobs (id, type, queue, payload, priority, priority_value, status, attempts, max_attempts,
                      next_retry_at, enqueued_at, last_error, last_error_class, last_error_traceback,
                      idempotency_key,
                      idempotency_fingerprint, unique_key, expires_at, concurrency_key, parked, owner_id, worker_id,
                      backend, trace_context)
    VALUES (%(id)s, %(type)s, %(queue)s, %(payload)s::jsonb, %(priority)s, %(priority_value)s,
            CASE WHEN %(waiting)s::boolean THEN %(waiting_status)s ELSE %(status)s END,
            0, %(max_attempts)s,
            %(next_retry_at)s, %(enqueued_at)s, '', '', '', %(idempotency_key)s,
            %(fingerprint)s, %(unique_key)s, %(expires_at)s, %(concurrency_key)s, %(parked)s, %(owner_id)s, '', %(backend)s, %(trace_context)s::jsonb)
        ON CONFLICT (idempotency_key, owner_id) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, created_at
), logged AS (
    INSERT INTO queue_app_job_logs (job_id, level, event, message, extra)
    SELECT id, 'info', %(event)s, %(message)s, %(extra)s::jsonb FROM job
), dispatch AS (
    INSERT INTO queue_app_job_outbox (job_id, action, queue, score, member, dispatch_after)
    SELECT id, %(action)s, %(queue)s, %(score)s, %(member)s,
           CASE WHEN %(direct)s::boolean THEN now() + make_interval(secs => %(relay_grace)s::float8) END
      FROM job
     WHERE NOT %(parked)s::boolean AND NOT %(waiting)s::boolean
)
SELECT id, created_at, CASE WHEN NOT %(direct)s::boolean THEN pg_notify('jobqueue_outbox', '') END FROM job

-- name: insert_jobs
-- Many jobs, given as one JSON array of objects (the keys of insert_job's
-- values, plus "position": 0, 1, 2, ... in the caller's order; payload and
-- extra as JSON text): one parameter parses much faster than an array per
-- column, and as json rather than jsonb it is read once instead of first
-- converted whole (about a tenth of a bulk call). Keyed jobs are inserted
-- sorted by key, so two calls sharing keys in different orders wait on each
-- other instead of deadlocking; a key already taken inserts nothing for that
-- job (the caller looks it up). Outbox rows get their ids in the caller's
-- order: the relay sends them in id order, which keeps a FIFO queue's order.
WITH request AS (
    SELECT *
      FROM json_to_recordset(%(jobs)s::json)
           AS r(position int, id uuid, type text, queue text, payload text, priority text, priority_value int,
                max_attempts int, next_retry_at timestamptz, enqueued_at timestamptz,
                idempotency_key text, fingerprint text, unique_key text, expires_at timestamptz,
                concurrency_key text, parked boolean, backend text, message text, extra text,
                action text, score float8, member text, direct boolean, waiting boolean)
), job AS (
    INSERT INTO queue_app_jobs (id, type, queue, payload, priority, priority_value, status, attempts, max_attempts,
                      next_retry_at, enqueued_at, last_error, last_error_class, last_error_traceback,
                      idempotency_key,
                      idempotency_fingerprint, unique_key, expires_at, concurrency_key, parked, owner_id, worker_id,
                      backend, trace_context)
    SELECT id, type, queue, payload::jsonb, priority, priority_value,
           CASE WHEN waiting THEN %(waiting_status)s ELSE %(status)s END, 0, max_attempts,
           next_retry_at, enqueued_at, '', '', '', idempotency_key,
           fingerprint, unique_key, expires_at, concurrency_key, parked, %(owner_id)s, '', backend, %(trace_context)s::jsonb
      FROM request
     ORDER BY idempotency_key NULLS LAST, position
        ON CONFLICT (idempotency_key, owner_id) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, created_at
), logged AS (
    INSERT INTO queue_app_job_logs (job_id, level, event, message, extra)
    SELECT request.id, 'info', %(event)s, request.message, request.extra::jsonb
      FROM request JOIN job USING (id)
     ORDER BY request.position
), dispatch AS (
    INSERT INTO queue_app_job_outbox (job_id, action, queue, score, member, dispatch_after)
    SELECT request.id, request.action, request.queue, request.score, request.member,
           CASE WHEN request.direct THEN now() + make_interval(secs => %(relay_grace)s::float8) END
      FROM request JOIN job USING (id)
     WHERE NOT request.parked AND NOT request.waiting
     ORDER BY request.position
), notified AS (
    SELECT pg_notify('jobqueue_outbox', '')
     WHERE EXISTS (SELECT FROM request JOIN job USING (id) WHERE NOT request.direct AND NOT request.parked)
)
SELECT job.id, job.created_at FROM job LEFT JOIN notified ON true
