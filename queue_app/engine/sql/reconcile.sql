-- The reconciler's reads. Pages are keyset pages by job id: %(after)s is
-- NULL for the first page (the planner folds the test away either way).

-- name: queued_jobs_page
-- One page of queued jobs, with what the grace rules need. The inner LIMIT
-- runs first, so the outbox look-up (by its job_id index) is made only for
-- the rows of this page. The last column: parked behind its concurrency key's job in
-- line, so kept out of Redis (the caller skips it; filtered here, a page would come
-- back short and end the paging).
SELECT j.id::text, j.queue, j.priority_value, j.enqueued_at, j.next_retry_at,
       j.next_retry_at IS NULL OR j.next_retry_at <= now() AS due,
       coalesce(o.pending, false) AS relay_pending,
       coalesce(j.next_retry_at > now() - make_interval(secs => %(grace)s) AND j.next_retry_at <= now(),
                false)
         OR coalesce(o.last_dispatched > now() - make_interval(secs => %(grace)s), false) AS recent,
       j.parked
  FROM (SELECT id, queue, priority_value, enqueued_at, next_retry_at, parked
          FROM queue_app_jobs
         WHERE status = 'queued' AND (%(after)s::uuid IS NULL OR id > %(after)s::uuid)
         ORDER BY id
         LIMIT %(limit)s) AS j
  LEFT JOIN LATERAL (
       SELECT bool_or(dispatched_at IS NULL) AS pending, max(dispatched_at) AS last_dispatched
         FROM queue_app_job_outbox
        WHERE job_id = j.id) AS o ON true
 ORDER BY j.id

-- name: expired_leases_page
-- One page of running jobs whose lease expired (what a dry run would rescue).
SELECT id::text, attempts, max_attempts
  FROM queue_app_jobs
 WHERE status IN ('processing', 'cancelling') AND lease_expires_at < now()
   AND (%(after)s::uuid IS NULL OR id > %(after)s::uuid)
 ORDER BY id
 LIMIT %(limit)s

-- name: expired_jobs_page
-- One page of queued jobs past their expiry (what a dry run would settle as expired).
SELECT id::text
  FROM queue_app_jobs
 WHERE status = 'queued' AND expires_at IS NOT NULL AND expires_at <= now()
   AND (%(after)s::uuid IS NULL OR id > %(after)s::uuid)
 ORDER BY id
 LIMIT %(limit)s

-- name: known_ids
-- Status, queue and relay-pending flag of the ids found in Redis: one
-- primary-key probe per id. (With "id = ANY(array)" the planner prefers a
-- full scan of the table once the array is large, for every chunk; the LIMIT
-- keeps the lateral subquery from being flattened into such a join.)
SELECT j.id::text, j.status, j.queue,
       EXISTS (SELECT 1 FROM queue_app_job_outbox o WHERE o.job_id = j.id AND o.dispatched_at IS NULL)
  FROM unnest(%(ids)s::uuid[]) AS wanted(id)
 CROSS JOIN LATERAL (SELECT id, status, queue FROM queue_app_jobs WHERE queue_app_jobs.id = wanted.id LIMIT 1) AS j
