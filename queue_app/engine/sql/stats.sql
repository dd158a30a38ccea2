-- Reads behind the queue's figures (engine/stats.py, engine/counts.py). Nothing here writes.

-- name: table_row_estimate
SELECT reltuples::bigint FROM pg_class WHERE oid = %(table)s::regclass

-- name: database_now
SELECT statement_timestamp()

-- name: job_status_capped_counts
-- Each status's jobs, counted no further than %(cap)s + 1: at most that many entries of
-- the status's partial index (idx_jobs_live_status, or idx_jobs_<status>_at for a finished
-- one), however stale the statistics are. Each status is spelled in its branch: only a
-- constant status proves a partial index's condition (tests/test_periodic_query_plans.py
-- checks that every status has its branch).
SELECT 'waiting', (SELECT count(*) FROM (SELECT 1 FROM queue_app_jobs WHERE status = 'waiting' LIMIT %(cap)s + 1) AS capped)
UNION ALL
SELECT 'queued', (SELECT count(*) FROM (SELECT 1 FROM queue_app_jobs WHERE status = 'queued' LIMIT %(cap)s + 1) AS capped)
UNION ALL
SELECT 'processing', (SELECT count(*) FROM (SELECT 1 FROM queue_app_jobs WHERE status = 'processing' LIMIT %(cap)s + 1) AS capped)
UNION ALL
SELECT 'cancelling', (SELECT count(*) FROM (SELECT 1 FROM queue_app_jobs WHERE status = 'cancelling' LIMIT %(cap)s + 1) AS capped)
UNION ALL
SELECT 'completed', (SELECT count(*) FROM (SELECT 1 FROM queue_app_jobs WHERE status = 'completed' LIMIT %(cap)s + 1) AS capped)
UNION ALL
SELECT 'failed', (SELECT count(*) FROM (SELECT 1 FROM queue_app_jobs WHERE status = 'failed' LIMIT %(cap)s + 1) AS capped)
UNION ALL
SELECT 'cancelled', (SELECT count(*) FROM (SELECT 1 FROM queue_app_jobs WHERE status = 'cancelled' LIMIT %(cap)s + 1) AS capped)
UNION ALL
SELECT 'expired', (SELECT count(*) FROM (SELECT 1 FROM queue_app_jobs WHERE status = 'expired' LIMIT %(cap)s + 1) AS capped)

-- name: job_count_estimates
-- The planner's own figures in one statement instead of an EXPLAIN per (queue, status): the
-- table's rows and, from ANALYZE's most common values, each status's and each queue's share.
-- No rows before the first ANALYZE.
WITH total AS (
    SELECT greatest(reltuples, 0) AS rows FROM pg_class WHERE oid = 'queue_app_jobs'::regclass
)
SELECT attname, value, freq, total.rows
  FROM total, pg_stats, unnest(most_common_vals::text::text[], most_common_freqs) AS mcv (value, freq)
 WHERE schemaname = current_schema() AND tablename = 'queue_app_jobs' AND attname IN ('queue', 'status')

-- name: job_counts_by_queue
-- Exact counts for the statuses counted small; ``scheduled`` = queued, waiting for a time.
-- A branch per status, as in job_status_capped_counts; a status not asked for is a
-- constant false, planned as no scan at all.
SELECT queue, 'waiting', count(*), 0 FROM queue_app_jobs
 WHERE status = 'waiting' AND 'waiting' = ANY(%(statuses)s::text[]) GROUP BY queue
UNION ALL
SELECT queue, 'queued', count(*), count(*) FILTER (WHERE next_retry_at > statement_timestamp()) FROM queue_app_jobs
 WHERE status = 'queued' AND 'queued' = ANY(%(statuses)s::text[]) GROUP BY queue
UNION ALL
SELECT queue, 'processing', count(*), 0 FROM queue_app_jobs
 WHERE status = 'processing' AND 'processing' = ANY(%(statuses)s::text[]) GROUP BY queue
UNION ALL
SELECT queue, 'cancelling', count(*), 0 FROM queue_app_jobs
 WHERE status = 'cancelling' AND 'cancelling' = ANY(%(statuses)s::text[]) GROUP BY queue
UNION ALL
SELECT queue, 'completed', count(*), 0 FROM queue_app_jobs
 WHERE status = 'completed' AND 'completed' = ANY(%(statuses)s::text[]) GROUP BY queue
UNION ALL
SELECT queue, 'failed', count(*), 0 FROM queue_app_jobs
 WHERE status = 'failed' AND 'failed' = ANY(%(statuses)s::text[]) GROUP BY queue
UNION ALL
SELECT queue, 'cancelled', count(*), 0 FROM queue_app_jobs
 WHERE status = 'cancelled' AND 'cancelled' = ANY(%(statuses)s::text[]) GROUP BY queue
UNION ALL
SELECT queue, 'expired', count(*), 0 FROM queue_app_jobs
 WHERE status = 'expired' AND 'expired' = ANY(%(statuses)s::text[]) GROUP BY queue

-- name: outbox_backlog_by_queue
-- Rows the relay has yet to send: undispatched, and past their dispatch_after
-- when their enqueuer pushed them itself (within it they are in Redis already);
-- such a row waits from then. Served by the partial index on undispatched rows.
SELECT queue, count(*) AS pending, min(coalesce(dispatch_after, created_at)) AS oldest
  FROM queue_app_job_outbox
 WHERE dispatched_at IS NULL
   AND (dispatch_after IS NULL OR dispatch_after <= statement_timestamp())
 GROUP BY queue

-- name: oldest_due_queued
-- A job scheduled for later is not waiting yet: its enqueued_at is its due time.
SELECT min(enqueued_at) FROM queue_app_jobs WHERE status = 'queued' AND enqueued_at <= statement_timestamp()

-- name: oldest_due_queued_among
SELECT min(enqueued_at)
  FROM queue_app_jobs
 WHERE id = ANY(%(ids)s::uuid[]) AND status = 'queued' AND enqueued_at <= statement_timestamp()

-- name: first_log_id_since
-- The first log row written at or after %(moment)s, found by bisecting the primary key (ids
-- and timestamps grow together): about 24 primary-key probes for 15,000,000 rows, in one
-- statement rather than a round trip each. Each step asks whether the first row at or past
-- the middle id was written since; no row when nothing was.
WITH RECURSIVE bisect (low, high) AS (
    SELECT min(id), max(id) FROM queue_app_job_logs
    UNION ALL
    SELECT CASE WHEN step.since THEN bisect.low ELSE step.middle + 1 END,
           CASE WHEN step.since THEN step.middle ELSE bisect.high END
      FROM bisect
     CROSS JOIN LATERAL (
        SELECT middle,
               coalesce((SELECT l.created_at >= %(moment)s FROM queue_app_job_logs l
                          WHERE l.id >= middle ORDER BY l.id LIMIT 1), false) AS since
          FROM (SELECT (bisect.low + bisect.high) / 2 AS middle) AS m
     ) AS step
     WHERE bisect.low < bisect.high
)
SELECT low FROM bisect
 WHERE low >= high
   AND (SELECT l.created_at >= %(moment)s FROM queue_app_job_logs l WHERE l.id >= low ORDER BY l.id LIMIT 1)
