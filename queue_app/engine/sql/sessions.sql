-- Statements for connections of their own, outside Django's pool: the lock
-- that makes a worker's name its own (runtime/worker_name.py) and the
-- liveness check (api/health.py and the name lock's session).

-- name: try_worker_name_lock
-- Session-level: held until the session ends (even by a SIGKILL of its process).
SELECT pg_try_advisory_lock(%(lock_class)s, %(key)s)

-- name: try_worker_name_xact_lock
-- Behind PgBouncer in transaction mode: held until the transaction the caller keeps open
-- ends, which is when its client connection does (PgBouncer then drops the server one).
SELECT pg_try_advisory_xact_lock(%(lock_class)s, %(key)s)

-- name: ping
SELECT 1
