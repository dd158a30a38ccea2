-- Statements for connections of their own, outside Django's pool: the lock
-- that makes a worker's name its own (runtime/worker_name.py) and the
-- liveness check (api/health.py and the name lock's session).

-- name: try_worker_name_lock
-- Session-level: held until the session ends (even by a SIGKILL of its process).
SELECT pg_try_advisory_lock(%(lock_class)s, %(key)s)

-- name: ping
SELECT 1
