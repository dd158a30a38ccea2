-- What a running attempt reports while it runs: its progress and its log lines. Fenced
-- like every write made for a running attempt: written only while the job is running
-- (%(running)s) under the fence the attempt's claim returned.

-- name: write_progress
-- The attempt's latest progress; no row back: the attempt no longer holds the job. The
-- UPDATE waits for a concurrent change of the row and checks the fence again after it.
UPDATE queue_app_jobs SET progress = %(fraction)s, progress_message = %(message)s, progress_at = now()
 WHERE id = %(id)s AND fence = %(fence)s AND status = ANY(%(running)s)
RETURNING id

-- name: write_log_lines
-- The attempt's log lines, in the order given; none when the attempt no longer holds the
-- job. FOR SHARE: a line is written before a concurrent claim, rescue or settle moves the
-- fence on (which waits for it), or sees the new fence and is refused.
WITH holder AS (
    SELECT id FROM queue_app_jobs
     WHERE id = %(id)s AND fence = %(fence)s AND status = ANY(%(running)s)
       FOR SHARE
)
INSERT INTO queue_app_job_logs (job_id, created_at, level, event, message, extra)
SELECT holder.id, now(), line.body->>'level', line.body->>'event', line.body->>'message', line.body->'extra'
  FROM holder, jsonb_array_elements(%(lines)s::jsonb) WITH ORDINALITY AS line(body, position)
 ORDER BY line.position
RETURNING id
