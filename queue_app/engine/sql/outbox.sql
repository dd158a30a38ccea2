-- The outbox's wake-up channel, the relay's claims, and upkeep. The channel
-- name lives here and in enqueue.sql (whose statements notify as they insert):
-- transitions notify on it, the relay listens on it.

-- name: notify_relay
-- Delivered only when the surrounding transaction commits.
SELECT pg_notify('jobqueue_outbox', '')

-- name: claim_outbox
-- One batch for one relay: due undispatched rows in id order, claimed by moving
-- their dispatch_after to the claim's end. The statement is its own short
-- transaction: the relay pushes to Redis holding no lock, other relays pass over
-- the claimed rows meanwhile, and if the relay dies before it marks them they
-- fall due again at the claim's end (at least once).
-- A strict-FIFO queue's rows are claimed only up to the queue's first
-- undispatched row this batch does not take (another relay has it, or is taking
-- it now): a later row must not reach the list before it. Grouped by the queue of
-- the row, with an id range bounded by the batch, so the look-up walks the batch's
-- stretch of the undispatched index only.
-- Each row comes with its job as it is now (the relay places the job where its
-- current state says, not where the row said) and that version of the job row
-- (xmin), which finish_outbox_claim compares once the push is done. The previous
-- dispatch_after tells a row its enqueuer pushed itself (or a relay that died).
WITH candidate AS MATERIALIZED (
    SELECT id, queue, dispatch_after
      FROM queue_app_job_outbox
     WHERE dispatched_at IS NULL AND (dispatch_after IS NULL OR dispatch_after <= now())
     ORDER BY id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), line_held AS (
    SELECT o.queue, min(o.id) AS first_held
      FROM queue_app_job_outbox o
     WHERE o.dispatched_at IS NULL
       AND EXISTS (SELECT FROM candidate WHERE queue = ANY(%(fifo_queues)s::text[]))
       AND o.queue = ANY(%(fifo_queues)s::text[])
       AND o.id < (SELECT max(id) FROM candidate)
       AND o.id NOT IN (SELECT id FROM candidate)
     GROUP BY o.queue
), claimed AS (
    UPDATE queue_app_job_outbox o
       SET dispatch_after = now() + make_interval(secs => %(claim_seconds)s)
      FROM candidate c
      LEFT JOIN line_held h ON h.queue = c.queue
     WHERE o.id = c.id AND (h.first_held IS NULL OR c.id < h.first_held)
    RETURNING o.id, o.job_id, o.action, o.queue, o.member, o.to_head, c.dispatch_after IS NOT NULL AS pushed,
              o.dispatch_after AS claimed_until
)
SELECT c.id, c.job_id, c.action, c.queue, c.member, c.to_head, c.pushed, c.claimed_until,
       j.status, j.queue, j.priority_value, j.enqueued_at,
       -- A time that has come is no wait: the job goes straight to its ready place.
       CASE WHEN j.next_retry_at > now() THEN j.next_retry_at END, j.xmin::text
  FROM claimed c
  JOIN queue_app_jobs j ON j.id = c.job_id
 ORDER BY c.id

-- name: finish_outbox_claim
-- After the push: the claimed rows whose job is still the version the claim read
-- are marked dispatched (the push placed the job as it still is). The others fall
-- due again at once: their job changed while the push was on its way, and the push
-- may have landed after the one made for that change, so they are sent again with
-- the job as it is then. Only rows still under this claim change: if it ran out and
-- another relay took them over, they are that relay's to finish.
UPDATE queue_app_job_outbox o
   SET dispatched_at = CASE WHEN j.xmin::text = sent.version THEN now() END,
       dispatch_after = CASE WHEN j.xmin::text = sent.version THEN o.dispatch_after END
  FROM unnest(%(ids)s::bigint[], %(versions)s::text[]) AS sent(id, version), queue_app_jobs j
 WHERE o.id = sent.id AND j.id = o.job_id
   AND o.dispatched_at IS NULL AND o.dispatch_after = %(claimed_until)s
RETURNING o.dispatched_at IS NOT NULL

-- name: release_outbox_claim
-- The push failed: the claimed rows fall due again at once, for whichever relay
-- reaches Redis first.
UPDATE queue_app_job_outbox SET dispatch_after = NULL
 WHERE id = ANY(%(ids)s::bigint[]) AND dispatched_at IS NULL AND dispatch_after = %(claimed_until)s

-- name: listen_outbox
LISTEN jobqueue_outbox

-- name: prune_outbox
-- One chunk of dispatched rows older than the retention, oldest first: a range of
-- idx_outbox_dispatched_at, then a primary-key probe per row. (With "id IN (subquery)"
-- the planner joins the chunk to a full scan of the outbox.)
DELETE FROM queue_app_job_outbox WHERE id = ANY(ARRAY(
    SELECT id FROM queue_app_job_outbox
     WHERE dispatched_at < now() - make_interval(secs => %(retention)s)
     ORDER BY dispatched_at
     LIMIT %(limit)s))
