-- Queue controls (the job_queues table): pause, resume, limits, and the
-- per-queue advisory locks that make the claim honour them exactly.
-- The lock key is (%(lock_class)s, hashtext(queue name)).

-- name: lock_queues_for_claim
-- Before a claim: a shared lock on each queue of the popped ids, exclusive on
-- those with a concurrency or rate limit (so their claims count and spend one
-- at a time). A pause or a limit change takes the exclusive lock, so it waits
-- for claims in flight and every later claim sees it. Locks in name order.
SELECT CASE WHEN t.exclusive
            THEN pg_advisory_xact_lock(%(lock_class)s, hashtext(t.name))::text
            ELSE pg_advisory_xact_lock_shared(%(lock_class)s, hashtext(t.name))::text END
  FROM unnest(%(queues)s::text[], %(exclusive)s::boolean[]) WITH ORDINALITY AS t(name, exclusive, position)
 ORDER BY t.position

-- name: lock_queue_for_change
SELECT pg_advisory_xact_lock(%(lock_class)s, hashtext(%(name)s))

-- name: claim_queues
-- For a claim whose caller did not say: the queues of the ids, and which have a limit.
SELECT DISTINCT jobs.queue,
       coalesce(q.concurrency_limit IS NOT NULL OR q.rate_limit IS NOT NULL, false)
  FROM jobs LEFT JOIN job_queues q ON q.name = jobs.queue
 WHERE jobs.id = ANY(%(ids)s::uuid[])
 ORDER BY jobs.queue
