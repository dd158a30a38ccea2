-- The claim, version 2, under its first names (no version suffix): the two functions that
-- migrations 0011_claim_function, 0013_claim_by_primary_key and 0014_claim_fast_path left,
-- written out whole. No migration loads this file: those three carry their own SQL. It is
-- here so the schema reads in one place, and tests/test_schema.py holds it to what the
-- migrations made. Workers of the releases before claim_v3 call queue_claim_jobs; the two
-- stay until a later migration drops them, once no such worker runs. See claim_v3.sql for
-- what each part does.

CREATE OR REPLACE FUNCTION queue_claim_controlled_jobs(
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
    p_exclusive text[] := ARRAY(
        SELECT t.name FROM unnest(p_queues, p_exclusive_flags) AS t(name, exclusive) WHERE t.exclusive
    );
BEGIN
    -- A shared lock on each queue of the ids, exclusive on those with a concurrency or
    -- rate limit (their claims count and spend one at a time). A pause or a limit change
    -- takes the exclusive lock: it waits for claims in flight, and every later claim sees
    -- it. In the caller's order (queue names, sorted).
    PERFORM CASE WHEN t.exclusive
                 THEN pg_advisory_xact_lock(p_lock_class, hashtext(t.name))::text
                 ELSE pg_advisory_xact_lock_shared(p_lock_class, hashtext(t.name))::text END
       FROM unnest(p_queues, p_exclusive_flags) WITH ORDINALITY AS t(name, exclusive, position)
      ORDER BY t.position;

    -- The claim, with a snapshot taken after the locks were granted. Paused queues get
    -- nothing; a queue with a concurrency limit gets at most its free slots (limit minus
    -- its processing jobs); a rate-limited queue at most the whole tokens of its bucket
    -- (refilled at rate_limit per second of the statement clock, up to
    -- max(1, rate_limit)), which the claim spends. A limited queue the caller did not
    -- lock exclusively gets nothing (its controls were not known to it). Returns the
    -- claimed jobs (claimed = true) and the queued, due ids the controls held back
    -- (claimed = false), which the caller puts back in place.
    RETURN QUERY
    WITH clock AS MATERIALIZED (
        SELECT clock_timestamp() AS at
    ), candidates AS (
        -- Primary-key look-ups only, whatever the statistics say: a join to the unnested
        -- ids may be planned as a scan of the whole table, and a status the statistics call
        -- rare ('queued', among a million completed jobs) as a scan of every queued job, per
        -- claim. So the status test is an expression no index matches (status || '').
        SELECT jobs.id, jobs.queue,
               row_number() OVER (PARTITION BY jobs.queue ORDER BY array_position(p_ids, jobs.id)) AS place
          FROM jobs
         WHERE jobs.id = ANY(p_ids)
           AND jobs.status || '' = ANY(p_sources)
           AND (jobs.next_retry_at IS NULL OR jobs.next_retry_at <= now())
    ), buckets AS (
        SELECT q.name, q.paused, q.concurrency_limit, q.rate_limit,
               q.name = ANY(p_exclusive) AS locked,
               -- NULL without a rate limit (least/greatest skip NULLs, hence the CASE).
               CASE WHEN q.rate_limit IS NOT NULL THEN
                   least(greatest(1, q.rate_limit),
                         coalesce(q.rate_tokens, greatest(1, q.rate_limit))
                         + q.rate_limit
                           * greatest(0, extract(epoch FROM clock.at - coalesce(q.rate_updated_at, clock.at))))
               END AS tokens
          FROM job_queues q, clock
         WHERE q.name IN (SELECT candidates.queue FROM candidates) OR q.name = ANY(p_exclusive)
    ), budgets AS (
        SELECT buckets.name, buckets.locked, buckets.rate_limit, buckets.tokens,
               CASE WHEN buckets.paused THEN 0
                    WHEN NOT buckets.locked
                         AND (buckets.concurrency_limit IS NOT NULL OR buckets.rate_limit IS NOT NULL) THEN 0
                    ELSE least(
                        -- Running jobs are counted only for a queue with a concurrency limit.
                        CASE WHEN buckets.concurrency_limit IS NULL THEN 2147483647
                             ELSE buckets.concurrency_limit - (SELECT count(*) FROM jobs p
                                                                WHERE p.queue = buckets.name
                                                                  AND p.status = p_target)
                        END,
                        coalesce(floor(buckets.tokens)::bigint, 2147483647))
               END AS allowed
          FROM buckets
    ), chosen AS (
        SELECT candidates.id, candidates.queue
          FROM candidates LEFT JOIN budgets ON budgets.name = candidates.queue
         WHERE budgets.name IS NULL OR candidates.place <= budgets.allowed
    ), claimed AS (
        UPDATE jobs
           SET status = p_target, attempts = jobs.attempts + 1, fence = jobs.fence + 1, started_at = now(),
               next_retry_at = NULL, worker_id = p_worker,
               lease_expires_at = now() + make_interval(secs => p_lease)
          FROM chosen
         WHERE jobs.id = chosen.id AND jobs.status || '' = ANY(p_sources)  -- by primary key
           AND (jobs.next_retry_at IS NULL OR jobs.next_retry_at <= now())
     RETURNING jobs.id, jobs.type, jobs.queue, jobs.payload, jobs.attempts, jobs.max_attempts, jobs.fence,
               jobs.trace_context, jobs.enqueued_at
    ), spent AS (
        UPDATE job_queues
           SET rate_tokens = budgets.tokens - (SELECT count(*) FROM chosen WHERE chosen.queue = budgets.name),
               rate_updated_at = (SELECT clock.at FROM clock)
          FROM budgets
         WHERE job_queues.name = budgets.name AND budgets.locked AND budgets.rate_limit IS NOT NULL
    ), logged AS (
        -- Stamped with the claim's clock: under a rate limit's lock these times are the
        -- bucket's own, in claim order.
        INSERT INTO job_logs (job_id, created_at, level, event, message, extra)
        SELECT claimed.id, (SELECT clock.at FROM clock), p_level, p_event, 'claimed by ' || p_worker,
               jsonb_build_object('attempt', claimed.attempts, 'fence', claimed.fence, 'worker', p_worker)
          FROM claimed
    )
    -- waited: seconds since the job became ready (enqueued_at is its enqueue, start or retry due time).
    SELECT claimed.id, claimed.type, claimed.queue, claimed.payload, claimed.attempts, claimed.max_attempts,
           claimed.fence, true, claimed.trace_context,
           EXTRACT(EPOCH FROM now() - claimed.enqueued_at)::float8
      FROM claimed
    UNION ALL
    SELECT candidates.id, NULL, candidates.queue, NULL, NULL, NULL, NULL, false, NULL, NULL
      FROM candidates
     WHERE candidates.id NOT IN (SELECT chosen.id FROM chosen);
END
$claim$;

CREATE OR REPLACE FUNCTION queue_claim_jobs(
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
$claim$;
