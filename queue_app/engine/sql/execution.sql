-- Running jobs: claim, complete, fail, lease. Fenced by the fence counter (+1 per claim).

-- name: claim_jobs
WITH claimed AS (
    UPDATE jobs
       SET status = 'processing', attempts = attempts + 1, fence = fence + 1, started_at = now(),
           next_retry_at = NULL, worker_id = %(worker)s,
           lease_expires_at = now() + make_interval(secs => %(lease)s)
     WHERE id = ANY(%(ids)s::uuid[]) AND status = 'queued'
       AND (next_retry_at IS NULL OR next_retry_at <= now())
 RETURNING id, type, queue, payload, attempts, max_attempts, fence
), logged AS (
    INSERT INTO job_logs (job_id, created_at, level, event, message, extra)
    SELECT id, now(), 'info', 'claimed', 'claimed by ' || %(worker)s,
           jsonb_build_object('attempt', attempts, 'fence', fence, 'worker', %(worker)s)
      FROM claimed
)
SELECT id, type, queue, payload, attempts, max_attempts, fence FROM claimed

-- name: mark_started
UPDATE jobs SET started_at = now()
 WHERE id = %(id)s AND status = 'processing' AND fence = %(fence)s
