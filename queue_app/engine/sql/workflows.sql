-- Workflows and batches (engine/workflows.py). The decisions are the functions of
-- schema/workflows_v2.sql; these statements call them and read the graph.

-- name: settle_dependents
-- Jobs %(ids)s just settled in this transaction: their waiting dependents are released or
-- cancelled now, in the same commit (a separate statement from the settle itself, so its
-- snapshot includes it). A released job with a concurrency key may park behind its key's job
-- in line (key_lock_class: its lock's class, KEY_LOCK_CLASS). Returns the dependents it moved.
SELECT id, status FROM queue_settle_dependents_v2(%(ids)s::uuid[], %(key_lock_class)s)

-- name: resume_dependents
-- Jobs %(ids)s were just retried: the jobs their failure cancelled wait again.
SELECT id, status FROM queue_resume_dependents_v2(%(ids)s::uuid[], %(key_lock_class)s)

-- name: lock_dependencies
-- The existing jobs a new job will depend on, locked until the enqueue commits: a settle of
-- one of them waits for the commit (and then sees the new dependent), or the enqueue waits
-- for the settle's commit (and then sees it settled, and decides the new job at once).
SELECT id, owner_id, status FROM queue_app_jobs WHERE id = ANY(%(ids)s::uuid[]) ORDER BY id FOR SHARE

-- name: parent_results
-- A job's dependencies in their order, with the step name each has in a workflow.
SELECT p.id, s.name, p.status, p.result
  FROM queue_app_job_dependencies d
  JOIN queue_app_jobs p ON p.id = d.depends_on_id
  LEFT JOIN queue_app_job_workflow_steps s ON s.job_id = p.id
 WHERE d.job_id = %(id)s
 ORDER BY d.position, d.id

-- name: batch_counts
-- A batch's members by status.
SELECT j.status, count(*)
  FROM queue_app_job_batch_members m JOIN queue_app_jobs j ON j.id = m.job_id
 WHERE m.batch_id = %(batch)s
 GROUP BY j.status
