-- Maintenance leases (the queue_app_job_maintenance_leases table): one row per queue naming
-- the process that sweeps its in-flight ids, promotes its due retries and rescues
-- its expired job leases, until expires_at (database clock). See
-- runtime/maintenance.py.

-- name: add_maintenance_leases
-- A row for each queue that has none yet, free to take.
INSERT INTO queue_app_job_maintenance_leases (queue, holder, expires_at, acquired_at)
SELECT name, '', now(), now() FROM unnest(%(queues)s::text[]) AS name
ON CONFLICT (queue) DO NOTHING

-- name: take_maintenance_leases
-- Renews the holder's leases and takes the expired ones; returns the queues it now
-- leads. SKIP LOCKED: two candidates never wait on (or deadlock over) one row, and
-- a row another takes at this moment is theirs. A lease still held by another and
-- unexpired is not even locked: a candidate's look costs no write.
UPDATE queue_app_job_maintenance_leases AS lease
   SET holder = %(holder)s,
       acquired_at = CASE WHEN lease.holder = %(holder)s THEN lease.acquired_at ELSE now() END,
       expires_at = now() + make_interval(secs => %(lease)s)
  FROM (SELECT queue FROM queue_app_job_maintenance_leases
         WHERE queue = ANY(%(queues)s::text[]) AND (holder = %(holder)s OR expires_at < now())
         ORDER BY queue
           FOR UPDATE SKIP LOCKED) AS free
 WHERE lease.queue = free.queue
RETURNING lease.queue

-- name: release_maintenance_leases
-- A holder that stops hands its leases on at once instead of letting them run out.
UPDATE queue_app_job_maintenance_leases SET holder = '', expires_at = now()
 WHERE queue = ANY(%(queues)s::text[]) AND holder = %(holder)s
