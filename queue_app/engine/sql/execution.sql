-- Running jobs, set-based: the batched claim and completion, the lease
-- rescue and the heartbeat. Fenced by jobs.fence (+1 per claim, never lowered). Statuses, events
-- and log levels are bound from states.TRANSITION_TABLE (%(sources)s,
-- %(target)s, %(event)s, %(level)s), never written here as literals.

-- name: claim_jobs
-- Runs after lock_queues_for_claim, so its snapshot sees every claim, pause and
-- limit change committed before the locks were granted. Paused queues get
-- nothing; a queue with a concurrency limit gets at most its free slots (limit
-- minus its processing jobs); a rate-limited queue at most the whole tokens of
-- its bucket (refilled at rate_limit per second of the statement clock, up to
-- max(1, rate_limit)), which the claim spends. A limited queue the caller did
-- not lock exclusively gets nothing (its controls were not known to it).
-- Returns the claimed jobs (claimed = true) and the queued, due ids the
-- controls held back (claimed = false), which the caller puts back in place.
WITH clock AS MATERIALIZED (
    SELECT clock_timestamp() AS at
), candidates AS (
    -- Primary-key look-ups only, whatever the statistics say: a join to the unnested ids
    -- may be planned as a scan of the whole table, and a status the statistics call rare
    -- ('queued', among a million completed jobs) as a scan of every queued job, per claim.
    -- So the status test is an expression no index matches (status || '').
    SELECT jobs.id, jobs.queue,
           row_number() OVER (PARTITION BY jobs.queue ORDER BY array_position(%(ids)s::uuid[], jobs.id)) AS place
      FROM jobs
     WHERE jobs.id = ANY(%(ids)s::uuid[])
       AND jobs.status || '' = ANY(%(sources)s)
       AND (jobs.next_retry_at IS NULL OR jobs.next_retry_at <= now())
), buckets AS (
    SELECT q.name, q.paused, q.concurrency_limit, q.rate_limit,
           q.name = ANY(%(exclusive)s) AS locked,
           -- NULL without a rate limit (least/greatest skip NULLs, hence the CASE).
           CASE WHEN q.rate_limit IS NOT NULL THEN
               least(greatest(1, q.rate_limit),
                     coalesce(q.rate_tokens, greatest(1, q.rate_limit))
                     + q.rate_limit
                       * greatest(0, extract(epoch FROM clock.at - coalesce(q.rate_updated_at, clock.at))))
           END AS tokens
      FROM job_queues q, clock
     WHERE q.name IN (SELECT queue FROM candidates) OR q.name = ANY(%(exclusive)s)
), budgets AS (
    SELECT name, locked, rate_limit, tokens,
           CASE WHEN paused THEN 0
                WHEN NOT locked AND (concurrency_limit IS NOT NULL OR rate_limit IS NOT NULL) THEN 0
                ELSE least(
                    coalesce(concurrency_limit - (SELECT count(*) FROM jobs p
                                                   WHERE p.queue = buckets.name AND p.status = %(target)s),
                             2147483647),
                    coalesce(floor(tokens)::bigint, 2147483647))
           END AS allowed
      FROM buckets
), chosen AS (
    SELECT candidates.id, candidates.queue
      FROM candidates LEFT JOIN budgets ON budgets.name = candidates.queue
     WHERE budgets.name IS NULL OR candidates.place <= budgets.allowed
), claimed AS (
    UPDATE jobs
       SET status = %(target)s, attempts = attempts + 1, fence = fence + 1, started_at = now(),
           next_retry_at = NULL, worker_id = %(worker)s,
           lease_expires_at = now() + make_interval(secs => %(lease)s)
      FROM chosen
     WHERE jobs.id = chosen.id AND jobs.status || '' = ANY(%(sources)s)  -- by primary key (see candidates)
       AND (jobs.next_retry_at IS NULL OR jobs.next_retry_at <= now())
 RETURNING jobs.id, jobs.type, jobs.queue, jobs.payload, jobs.attempts, jobs.max_attempts, jobs.fence,
           jobs.trace_context, jobs.enqueued_at
), spent AS (
    UPDATE job_queues
       SET rate_tokens = budgets.tokens - (SELECT count(*) FROM chosen WHERE chosen.queue = budgets.name),
           rate_updated_at = (SELECT at FROM clock)
      FROM budgets
     WHERE job_queues.name = budgets.name AND budgets.locked AND budgets.rate_limit IS NOT NULL
), logged AS (
    -- Stamped with the claim statement's clock: under a rate limit's lock these
    -- times are the bucket's own, in claim order.
    INSERT INTO job_logs (job_id, created_at, level, event, message, extra)
    SELECT id, (SELECT at FROM clock), %(level)s, %(event)s, 'claimed by ' || %(worker)s,
           jsonb_build_object('attempt', attempts, 'fence', fence, 'worker', %(worker)s)
      FROM claimed
)
-- waited: seconds since the job became ready (enqueued_at is its enqueue, start or retry due time).
SELECT id, type, queue, payload, attempts, max_attempts, fence, true, trace_context,
       EXTRACT(EPOCH FROM now() - enqueued_at)::float8 AS waited
  FROM claimed
UNION ALL
SELECT id, NULL, queue, NULL, NULL, NULL, NULL, false, NULL, NULL FROM candidates
 WHERE id NOT IN (SELECT id FROM chosen)

-- name: complete_jobs
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, fence bigint, result jsonb)
), done AS (
    UPDATE jobs
       SET status = %(target)s, result = input.result, completed_at = now(),
           last_error = '', last_error_class = '', last_error_traceback = '', worker_id = '', lease_expires_at = NULL
      FROM input
     WHERE jobs.id = input.id AND jobs.status = ANY(%(sources)s) AND jobs.fence = input.fence
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
-- Heartbeat: push out the leases a worker still holds.
UPDATE jobs SET lease_expires_at = now() + make_interval(secs => %(lease)s)
  FROM jsonb_to_recordset(%(rows)s::jsonb) AS t(id uuid, fence bigint)
 WHERE jobs.id = t.id AND jobs.fence = t.fence
   AND jobs.status = %(processing)s AND jobs.worker_id = %(worker)s
RETURNING jobs.id


-- name: mark_started
-- A claimed job that starts noticeably after its claim: started_at is its start.
UPDATE jobs SET started_at = now()
 WHERE id = %(id)s AND status = 'processing' AND fence = %(fence)s
