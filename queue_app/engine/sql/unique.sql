-- Unique jobs (queue_app/engine/uniqueness.py): the lock, then the look-up, as two
-- statements: the look-up's snapshot must be taken after the lock is granted.

-- name: lock_unique_keys
-- A transaction-scoped advisory lock per (owner, key), held until the enqueuing
-- transaction ends. Taken in hash order, so two calls sharing keys wait on each
-- other instead of deadlocking. Returns the transaction's isolation level, which
-- the look-up's correctness depends on.
SELECT current_setting('transaction_isolation'), count(pg_advisory_xact_lock(%(lock_class)s, hash))
  FROM (SELECT DISTINCT hashtext(%(scope)s || '/' || key) AS hash
          FROM unnest(%(keys)s::text[]) AS key
         ORDER BY hash) AS locks

-- name: find_unique_jobs
-- For each request (its position, key, statuses and period in seconds or null), the
-- newest job of the owner holding the key: in one of the statuses, and created within
-- the period. Rows as Job.objects.raw reads them, plus the request's position.
SELECT job.*, request.position AS unique_position
  FROM json_to_recordset(%(requests)s::json) AS request(position int, key text, states text[], seconds float8)
 CROSS JOIN LATERAL (
       SELECT *
         FROM queue_app_jobs
        WHERE queue_app_jobs.unique_key = request.key
          AND queue_app_jobs.owner_id IS NOT DISTINCT FROM %(owner_id)s
          AND queue_app_jobs.status = ANY (request.states)
          AND (request.seconds IS NULL OR queue_app_jobs.created_at > now() - make_interval(secs => request.seconds))
        ORDER BY queue_app_jobs.created_at DESC, queue_app_jobs.id DESC
        LIMIT 1
       ) AS job
