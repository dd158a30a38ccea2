-- Queue controls (the queue_app_job_queues table): pause, resume, limits, and the
-- per-queue advisory locks that make the claim honour them exactly.
-- The lock key is (%(lock_class)s, hashtext(queue name)); the claim takes its
-- locks inside queue_claim_jobs (see execution.sql).

-- name: lock_queue_for_change
SELECT pg_advisory_xact_lock(%(lock_class)s, hashtext(%(name)s))

-- name: claim_queues
-- For a claim whose caller did not say: the queues of the ids, and which have a limit.
SELECT DISTINCT queue_app_jobs.queue,
       coalesce(q.concurrency_limit IS NOT NULL OR q.rate_limit IS NOT NULL
                OR q.key_concurrency_limit IS NOT NULL OR q.key_rate_limit IS NOT NULL, false)
  FROM queue_app_jobs LEFT JOIN queue_app_job_queues q ON q.name = queue_app_jobs.queue
 WHERE queue_app_jobs.id = ANY(%(ids)s::uuid[])
 ORDER BY queue_app_jobs.queue

-- name: prune_full_key_buckets
-- A key's rate bucket that has refilled to its capacity says nothing a missing row does not
-- (the claim starts a key without a row with a full bucket), and one of a queue with no
-- per-key rate any more says nothing at all: deleted, so the table holds only keys that
-- started jobs lately. A claim spending a bucket meanwhile re-inserts its row.
DELETE FROM queue_app_job_key_buckets b
 USING queue_app_job_queues q
 WHERE q.name = b.queue AND b.queue = ANY(%(queues)s::text[])
   AND (q.key_rate_limit IS NULL
        OR b.tokens + q.key_rate_limit * extract(epoch FROM now() - b.updated_at) >= greatest(1, q.key_rate_limit))
