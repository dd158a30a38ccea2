"""The claim takes a short path when its jobs' queues have no controls.

Most claims are of ids whose queues are neither paused nor limited, and for
them the full claim of 0011 (candidates ranked per queue, the queues' buckets
and budgets, the held-back ids) is work with a known answer: claim every due,
queued job. ``queue_claim_jobs`` now takes the queue locks, then claims by
primary key every such job whose queue has no controls (a fresh snapshot,
taken after the locks, as before). When that claimed every id it returns;
otherwise (a paused or limited queue, or an id no longer queued) the full
claim, renamed ``queue_claim_controlled_jobs``, runs for the same ids: the
jobs just claimed are no longer queued, so it sees only the rest. In
pgbench, a claim of one job took about a sixth less server time.
"""

from django.db import migrations

ARGUMENTS = "uuid[], text, float8, text[], boolean[], integer, text[], text, text, text"

CREATE_CLAIM_FUNCTION = """
CREATE FUNCTION queue_claim_jobs(
    p_ids uuid[], p_worker text, p_lease float8,
    p_queues text[], p_exclusive_flags boolean[], p_lock_class integer,
    p_sources text[], p_target text, p_event text, p_level text
) RETURNS TABLE (
    id uuid, type varchar, queue varchar, payload jsonb, attempts integer, max_attempts integer,
    fence bigint, claimed boolean, trace_context jsonb, waited float8
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
AS $claim$
#variable_conflict use_column
DECLARE
    claimed_count integer;
BEGIN
    -- The queue locks, as queue_claim_controlled_jobs takes them (which, taken again
    -- there, are held twice: advisory locks count).
    PERFORM CASE WHEN t.exclusive
                 THEN pg_advisory_xact_lock(p_lock_class, hashtext(t.name))::text
                 ELSE pg_advisory_xact_lock_shared(p_lock_class, hashtext(t.name))::text END
       FROM unnest(p_queues, p_exclusive_flags) WITH ORDINALITY AS t(name, exclusive, position)
      ORDER BY t.position;

    -- Every due, queued job of the ids whose queue is neither paused nor limited.
    RETURN QUERY
    WITH clock AS MATERIALIZED (
        SELECT clock_timestamp() AS at
    ), claimed AS (
        UPDATE jobs
           SET status = p_target, attempts = jobs.attempts + 1, fence = jobs.fence + 1, started_at = now(),
               next_retry_at = NULL, worker_id = p_worker,
               lease_expires_at = now() + make_interval(secs => p_lease)
         WHERE jobs.id = ANY(p_ids) AND jobs.status || '' = ANY(p_sources)
           AND (jobs.next_retry_at IS NULL OR jobs.next_retry_at <= now())
           AND NOT EXISTS (SELECT FROM job_queues q
                            WHERE q.name = jobs.queue
                              AND (q.paused OR q.concurrency_limit IS NOT NULL OR q.rate_limit IS NOT NULL))
     RETURNING jobs.id, jobs.type, jobs.queue, jobs.payload, jobs.attempts, jobs.max_attempts, jobs.fence,
               jobs.trace_context, jobs.enqueued_at
    ), logged AS (
        INSERT INTO job_logs (job_id, created_at, level, event, message, extra)
        SELECT claimed.id, (SELECT clock.at FROM clock), p_level, p_event, 'claimed by ' || p_worker,
               jsonb_build_object('attempt', claimed.attempts, 'fence', claimed.fence, 'worker', p_worker)
          FROM claimed
    )
    SELECT claimed.id, claimed.type, claimed.queue, claimed.payload, claimed.attempts, claimed.max_attempts,
           claimed.fence, true, claimed.trace_context,
           EXTRACT(EPOCH FROM now() - claimed.enqueued_at)::float8
      FROM claimed;
    GET DIAGNOSTICS claimed_count = ROW_COUNT;
    IF claimed_count = cardinality(p_ids) THEN
        RETURN;
    END IF;

    -- The rest: jobs of controlled queues (claimed within their limits, or held back)
    -- and ids no longer claimable (skipped).
    RETURN QUERY
    SELECT * FROM queue_claim_controlled_jobs(p_ids, p_worker, p_lease, p_queues, p_exclusive_flags,
                                              p_lock_class, p_sources, p_target, p_event, p_level);
END
$claim$
"""


class Migration(migrations.Migration):
    dependencies = [
        ("queue_app", "0013_claim_by_primary_key"),
    ]

    operations = [
        migrations.RunSQL(
            f"ALTER FUNCTION queue_claim_jobs({ARGUMENTS}) RENAME TO queue_claim_controlled_jobs",
            f"ALTER FUNCTION queue_claim_controlled_jobs({ARGUMENTS}) RENAME TO queue_claim_jobs",
        ),
        migrations.RunSQL(CREATE_CLAIM_FUNCTION, f"DROP FUNCTION queue_claim_jobs({ARGUMENTS})"),
    ]
