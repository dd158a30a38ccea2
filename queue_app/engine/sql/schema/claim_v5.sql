-- The claim, version 5: loaded by migration 0026_app_table_names, called by the statement
-- claim_jobs (engine/sql/execution.sql). One call takes the queue locks and claims.
--
-- Since version 4 (claim_v4.sql): the same statements on the tables' new names, which carry
-- the app's namespace (queue_app_jobs, queue_app_job_logs, ...), and an expiry settled here
-- decides the workflow steps waiting on the job in the same transaction
-- (queue_settle_dependents_v2, which parks a released step behind its key's job in line
-- under the key's lock, p_lock_class + 1, tried as this claim tries it). What follows
-- describes version 4 and holds for this one.
--
-- queue_claim_jobs_v5 takes the locks, then claims by primary key every due, queued, unexpired
-- job of the ids whose queue has no controls (paused, a concurrency or rate limit, or, for a
-- job with a concurrency key, a per-key limit). When that claimed every id it returns;
-- otherwise queue_claim_controlled_jobs_v5 runs for the same ids: it settles the expired ones
-- as expired, claims the rest within their queues' and keys' limits and returns the ids the
-- controls held back (claimed = false), which the caller puts back in place. Expired ids are
-- not returned: the caller acknowledges them like any id no longer queued.
--
-- Both are VOLATILE, so each statement takes a fresh snapshot: the claim sees every pause,
-- limit change and claim committed before its locks were granted (and the expiry its first
-- statement wrote). They run on generic plans, without JIT and with sequential scans off, as
-- version 3 does (see claim_v3.sql for why).
--
-- Since version 3 (claim_v3.sql):
-- - a job past its expires_at is never claimed: the claim settles it (p_expire_target, with
--   its log row, event p_expire_event);
-- - round robin among keys: a job with a concurrency_key always takes the full claim, which
--   gives its key the next turn: the key's first parked job (queue_app_jobs.parked, kept out of Redis
--   by the enqueue while another job of its key is in line) is unparked, made ready at the
--   back of the line (enqueued_at = now) and sent to Redis through the outbox. Under the
--   key's advisory lock (p_lock_class + 1, hashtext(queue || '/' || key)), which the enqueue
--   takes to decide whether to park; the claim only tries it (never waits on an enqueuer's
--   transaction) and leaves a key it could not lock to the maintenance leader's
--   queue_release_stalled_keys chore;
-- - per-key limits (queue_app_job_queues.key_concurrency_limit, key_rate_limit) for jobs with a
--   concurrency_key: at most key_concurrency_limit of one key's jobs running (processing or
--   cancelling), and at most the whole tokens of the key's bucket (queue_app_job_key_buckets, refilled
--   at key_rate_limit per second up to max(1, key_rate_limit)) started. A queue with per-key
--   limits counts as limited: its claims take its lock exclusively, so one key's count and
--   bucket change one claim at a time. Ids held back by a key's limits come back with type
--   'key' (the caller moves them aside, so other keys' ids behind them are popped). Jobs
--   without a key never read a key's rows.
--
-- A released version is never edited: the next change is a claim_v6.sql with new names.

CREATE OR REPLACE FUNCTION queue_claim_jobs_v5(
    p_ids uuid[], p_worker text, p_lease float8,
    p_queues text[], p_exclusive_flags boolean[], p_lock_class integer,
    p_sources text[], p_target text, p_event text, p_level text,
    p_expire_target text, p_expire_event text, p_expire_level text
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
    -- The queue locks, as queue_claim_controlled_jobs_v5 takes them (which, taken again
    -- there, are held twice: advisory locks count).
    PERFORM CASE WHEN t.exclusive
                 THEN pg_advisory_xact_lock(p_lock_class, hashtext(t.name))::text
                 ELSE pg_advisory_xact_lock_shared(p_lock_class, hashtext(t.name))::text END
       FROM unnest(p_queues, p_exclusive_flags) WITH ORDINALITY AS t(name, exclusive, position)
      ORDER BY t.position;

    -- Every due, unexpired, queued job without a key of the ids whose queue is neither
    -- paused nor limited.
    RETURN QUERY
    WITH clock AS MATERIALIZED (
        SELECT clock_timestamp() AS at
    ), claimed AS (
        UPDATE queue_app_jobs
           SET status = p_target, attempts = queue_app_jobs.attempts + 1, fence = queue_app_jobs.fence + 1, started_at = now(),
               next_retry_at = NULL, worker_id = p_worker,
               lease_expires_at = now() + make_interval(secs => p_lease)
         WHERE queue_app_jobs.id = ANY(p_ids) AND queue_app_jobs.status || '' = ANY(p_sources)
           AND (queue_app_jobs.next_retry_at IS NULL OR queue_app_jobs.next_retry_at <= now())
           AND (queue_app_jobs.expires_at IS NULL OR queue_app_jobs.expires_at > now())
           AND queue_app_jobs.concurrency_key IS NULL
           AND NOT EXISTS (SELECT FROM queue_app_job_queues q
                            WHERE q.name = queue_app_jobs.queue
                              AND (q.paused OR q.concurrency_limit IS NOT NULL OR q.rate_limit IS NOT NULL))
     RETURNING queue_app_jobs.id, queue_app_jobs.type, queue_app_jobs.queue, queue_app_jobs.payload, queue_app_jobs.attempts, queue_app_jobs.max_attempts, queue_app_jobs.fence,
               queue_app_jobs.trace_context, queue_app_jobs.enqueued_at
    ), logged AS (
        INSERT INTO queue_app_job_logs (job_id, created_at, level, event, message, extra)
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

    -- The rest: expired jobs (settled), jobs with a key or of controlled queues (claimed
    -- within their limits, or held back) and ids no longer claimable (skipped).
    RETURN QUERY
    SELECT * FROM queue_claim_controlled_jobs_v5(p_ids, p_worker, p_lease, p_queues, p_exclusive_flags,
                                                 p_lock_class, p_sources, p_target, p_event, p_level,
                                                 p_expire_target, p_expire_event, p_expire_level);
END
$claim$;

CREATE OR REPLACE FUNCTION queue_claim_controlled_jobs_v5(
    p_ids uuid[], p_worker text, p_lease float8,
    p_queues text[], p_exclusive_flags boolean[], p_lock_class integer,
    p_sources text[], p_target text, p_event text, p_level text,
    p_expire_target text, p_expire_event text, p_expire_level text
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
    expired_ids uuid[];
    -- The keys of the ids whose lock this claim holds: those it gives their next turn.
    locked_keys integer[];
    unparked_count integer;
    turn_at timestamptz;
BEGIN
    -- A shared lock on each queue of the ids, exclusive on those with a concurrency or
    -- rate limit, or a per-key one (their claims count and spend one at a time). A pause
    -- or a limit change takes the exclusive lock: it waits for claims in flight, and every
    -- later claim sees it. In the caller's order (queue names, sorted).
    PERFORM CASE WHEN t.exclusive
                 THEN pg_advisory_xact_lock(p_lock_class, hashtext(t.name))::text
                 ELSE pg_advisory_xact_lock_shared(p_lock_class, hashtext(t.name))::text END
       FROM unnest(p_queues, p_exclusive_flags) WITH ORDINALITY AS t(name, exclusive, position)
      ORDER BY t.position;

    -- The keys' locks, tried (never waited for, so in any order): a key an enqueue holds
    -- now is skipped (the maintenance leader gives it its turn if no id of it is in line).
    locked_keys := ARRAY(
        SELECT k.h FROM (SELECT DISTINCT hashtext(queue_app_jobs.queue || '/' || queue_app_jobs.concurrency_key) AS h
                           FROM queue_app_jobs WHERE queue_app_jobs.id = ANY(p_ids) AND queue_app_jobs.concurrency_key IS NOT NULL) AS k
         WHERE pg_try_advisory_xact_lock(p_lock_class + 1, k.h)
         ORDER BY k.h
    );

    -- Expired ids never start: settled here, under the same compare-and-set on the status
    -- as every transition (a cancel committed first leaves the job cancelled). A workflow
    -- step waiting on one is decided in this transaction too (workflows_v2.sql).
    WITH expired AS (
        UPDATE queue_app_jobs
           SET status = p_expire_target, completed_at = now(), next_retry_at = NULL
         WHERE queue_app_jobs.id = ANY(p_ids) AND queue_app_jobs.status || '' = ANY(p_sources)
           AND queue_app_jobs.expires_at <= now()
     RETURNING queue_app_jobs.id, queue_app_jobs.expires_at
    ), logged AS (
        INSERT INTO queue_app_job_logs (job_id, created_at, level, event, message, extra)
        SELECT expired.id, clock_timestamp(), p_expire_level, p_expire_event, 'not started by its expiry',
               jsonb_build_object('expires_at', expired.expires_at, 'worker', p_worker)
          FROM expired
    )
    SELECT coalesce(array_agg(expired.id), '{}') INTO expired_ids FROM expired;
    IF cardinality(expired_ids) > 0 THEN
        PERFORM queue_settle_dependents_v2(expired_ids, p_lock_class + 1);
    END IF;

    -- The claim, with a snapshot taken after the locks were granted and the expiry written.
    -- Paused queues get nothing; a queue with a concurrency limit gets at most its free
    -- slots; a rate-limited queue at most the whole tokens of its bucket (see claim_v3.sql).
    -- A job with a key in a queue with per-key limits passes its key's limits first: at
    -- most the key's free slots and whole tokens, in pop order within the key. A limited
    -- queue the caller did not lock exclusively gets nothing (its controls were not known
    -- to it). Returns the claimed jobs (claimed = true) and the queued, due ids the controls
    -- held back (claimed = false), which the caller puts back in place.
    RETURN QUERY
    WITH clock AS MATERIALIZED (
        SELECT clock_timestamp() AS at
    ), candidates AS (
        -- Primary-key look-ups only (see claim_v3.sql: status || '' matches no index).
        SELECT queue_app_jobs.id, queue_app_jobs.queue, queue_app_jobs.concurrency_key AS key, array_position(p_ids, queue_app_jobs.id) AS position,
               row_number() OVER (PARTITION BY queue_app_jobs.queue, queue_app_jobs.concurrency_key
                                  ORDER BY array_position(p_ids, queue_app_jobs.id)) AS key_place
          FROM queue_app_jobs
         WHERE queue_app_jobs.id = ANY(p_ids)
           AND queue_app_jobs.status || '' = ANY(p_sources)
           AND (queue_app_jobs.next_retry_at IS NULL OR queue_app_jobs.next_retry_at <= now())
    ), buckets AS (
        SELECT q.name, q.paused, q.concurrency_limit, q.rate_limit,
               q.key_concurrency_limit, q.key_rate_limit,
               q.name = ANY(p_exclusive) AS locked,
               -- NULL without a rate limit (least/greatest skip NULLs, hence the CASE).
               CASE WHEN q.rate_limit IS NOT NULL THEN
                   least(greatest(1, q.rate_limit),
                         coalesce(q.rate_tokens, greatest(1, q.rate_limit))
                         + q.rate_limit
                           * greatest(0, extract(epoch FROM clock.at - coalesce(q.rate_updated_at, clock.at))))
               END AS tokens
          FROM queue_app_job_queues q, clock
         WHERE q.name IN (SELECT candidates.queue FROM candidates) OR q.name = ANY(p_exclusive)
    ), key_buckets AS (
        -- One row per (queue, key) of the candidates whose queue limits keys; only then
        -- are a key's running jobs counted and its bucket read.
        SELECT keys.queue, keys.key, buckets.key_rate_limit, buckets.locked,
               CASE WHEN buckets.key_rate_limit IS NOT NULL THEN
                   least(greatest(1, buckets.key_rate_limit),
                         coalesce(b.tokens, greatest(1, buckets.key_rate_limit))
                         + buckets.key_rate_limit
                           * greatest(0, extract(epoch FROM clock.at - coalesce(b.updated_at, clock.at))))
               END AS tokens,
               buckets.key_concurrency_limit
          FROM (SELECT DISTINCT candidates.queue, candidates.key FROM candidates
                 WHERE candidates.key IS NOT NULL) AS keys
          JOIN buckets ON buckets.name = keys.queue
                      AND (buckets.key_concurrency_limit IS NOT NULL OR buckets.key_rate_limit IS NOT NULL)
          CROSS JOIN clock
          LEFT JOIN queue_app_job_key_buckets b ON b.queue = keys.queue AND b.key = keys.key
    ), key_budgets AS (
        SELECT key_buckets.queue, key_buckets.key, key_buckets.locked, key_buckets.key_rate_limit,
               key_buckets.tokens,
               CASE WHEN NOT key_buckets.locked THEN 0
                    ELSE least(
                        -- Literal statuses and key test, the condition of idx_jobs_running_key.
                        CASE WHEN key_buckets.key_concurrency_limit IS NULL THEN 2147483647
                             ELSE key_buckets.key_concurrency_limit
                                  - (SELECT count(*) FROM queue_app_jobs p
                                      WHERE p.queue = key_buckets.queue AND p.concurrency_key = key_buckets.key
                                        AND p.status IN ('processing', 'cancelling')
                                        AND p.concurrency_key IS NOT NULL)
                        END,
                        coalesce(floor(key_buckets.tokens)::bigint, 2147483647))
               END AS allowed
          FROM key_buckets
    ), key_passed AS (
        SELECT candidates.id, candidates.queue, candidates.key,
               row_number() OVER (PARTITION BY candidates.queue ORDER BY candidates.position) AS place
          FROM candidates
          LEFT JOIN key_budgets ON key_budgets.queue = candidates.queue AND key_budgets.key = candidates.key
         WHERE key_budgets.queue IS NULL OR candidates.key_place <= key_budgets.allowed
    ), budgets AS (
        SELECT buckets.name, buckets.locked, buckets.rate_limit, buckets.tokens,
               CASE WHEN buckets.paused THEN 0
                    WHEN NOT buckets.locked
                         AND (buckets.concurrency_limit IS NOT NULL OR buckets.rate_limit IS NOT NULL
                              OR buckets.key_concurrency_limit IS NOT NULL OR buckets.key_rate_limit IS NOT NULL)
                         THEN 0
                    ELSE least(
                        -- Literal statuses, the condition of idx_jobs_running_queue.
                        CASE WHEN buckets.concurrency_limit IS NULL THEN 2147483647
                             ELSE buckets.concurrency_limit - (SELECT count(*) FROM queue_app_jobs p
                                                                WHERE p.queue = buckets.name
                                                                  AND p.status IN ('processing', 'cancelling'))
                        END,
                        coalesce(floor(buckets.tokens)::bigint, 2147483647))
               END AS allowed
          FROM buckets
    ), chosen AS (
        SELECT key_passed.id, key_passed.queue, key_passed.key
          FROM key_passed LEFT JOIN budgets ON budgets.name = key_passed.queue
         WHERE budgets.name IS NULL OR key_passed.place <= budgets.allowed
    ), claimed AS (
        UPDATE queue_app_jobs
           SET status = p_target, attempts = queue_app_jobs.attempts + 1, fence = queue_app_jobs.fence + 1, started_at = now(),
               next_retry_at = NULL, worker_id = p_worker,
               lease_expires_at = now() + make_interval(secs => p_lease), parked = false
          FROM chosen
         WHERE queue_app_jobs.id = chosen.id AND queue_app_jobs.status || '' = ANY(p_sources)  -- by primary key
           AND (queue_app_jobs.next_retry_at IS NULL OR queue_app_jobs.next_retry_at <= now())
     RETURNING queue_app_jobs.id, queue_app_jobs.type, queue_app_jobs.queue, queue_app_jobs.payload, queue_app_jobs.attempts, queue_app_jobs.max_attempts, queue_app_jobs.fence,
               queue_app_jobs.trace_context, queue_app_jobs.enqueued_at
    ), spent AS (
        UPDATE queue_app_job_queues
           SET rate_tokens = budgets.tokens - (SELECT count(*) FROM chosen WHERE chosen.queue = budgets.name),
               rate_updated_at = (SELECT clock.at FROM clock)
          FROM budgets
         WHERE queue_app_job_queues.name = budgets.name AND budgets.locked AND budgets.rate_limit IS NOT NULL
    ), key_spent AS (
        INSERT INTO queue_app_job_key_buckets (queue, key, tokens, updated_at)
        SELECT key_budgets.queue, key_budgets.key,
               key_budgets.tokens - (SELECT count(*) FROM chosen
                                      WHERE chosen.queue = key_budgets.queue AND chosen.key = key_budgets.key),
               (SELECT clock.at FROM clock)
          FROM key_budgets
         WHERE key_budgets.locked AND key_budgets.key_rate_limit IS NOT NULL
            ON CONFLICT (queue, key) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at
    ), logged AS (
        INSERT INTO queue_app_job_logs (job_id, created_at, level, event, message, extra)
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
    SELECT candidates.id,
           -- 'key': held back by its key's limits, not its queue's.
           CASE WHEN candidates.id NOT IN (SELECT key_passed.id FROM key_passed) THEN 'key' END::varchar,
           candidates.queue, NULL, NULL, NULL, NULL, false, NULL, NULL
      FROM candidates
     WHERE candidates.id NOT IN (SELECT chosen.id FROM chosen);

    -- Each locked key with no id left in line (its ready one claimed or expired just now)
    -- gets its next turn: its first parked job, by priority then age, goes to the back of
    -- the line. The literal statuses are the conditions of idx_jobs_queued_key and
    -- idx_jobs_parked_key.
    IF cardinality(locked_keys) > 0 THEN
        turn_at := clock_timestamp();
        WITH keys AS (
            -- place: where the key's first id was in this claim. The keys' next jobs join
            -- the line in that order (a microsecond apart), so a key that went first in
            -- this round goes first in the next.
            SELECT queue_app_jobs.queue, queue_app_jobs.concurrency_key AS key, min(array_position(p_ids, queue_app_jobs.id)) AS place
              FROM queue_app_jobs
             WHERE queue_app_jobs.id = ANY(p_ids) AND queue_app_jobs.concurrency_key IS NOT NULL
               AND hashtext(queue_app_jobs.queue || '/' || queue_app_jobs.concurrency_key) = ANY(locked_keys)
             GROUP BY queue_app_jobs.queue, queue_app_jobs.concurrency_key
        ), next AS (
            SELECT keys.place, (SELECT p.id FROM queue_app_jobs p
                     WHERE p.queue = keys.queue AND p.concurrency_key = keys.key
                       AND p.parked AND p.status = 'queued'
                     ORDER BY p.priority_value DESC, p.enqueued_at
                     LIMIT 1) AS id
              FROM keys
             WHERE NOT EXISTS (SELECT FROM queue_app_jobs u
                                WHERE u.queue = keys.queue AND u.concurrency_key = keys.key
                                  AND u.status = 'queued' AND NOT u.parked AND u.concurrency_key IS NOT NULL
                                  AND (u.next_retry_at IS NULL OR u.next_retry_at <= now()))
        ), unparked AS (
            UPDATE queue_app_jobs SET parked = false, enqueued_at = turn_at + make_interval(secs => next.place * 1e-6)
              FROM next
             WHERE queue_app_jobs.id = next.id AND queue_app_jobs.parked AND queue_app_jobs.status = 'queued'
         RETURNING queue_app_jobs.id, queue_app_jobs.queue
        ), sent AS (
            -- No member: the relay places the job by its state (its enqueued_at now).
            INSERT INTO queue_app_job_outbox (job_id, action, queue, member)
            SELECT unparked.id, 'enqueue', unparked.queue, '' FROM unparked
            RETURNING 1
        )
        SELECT count(*) INTO unparked_count FROM sent;
        IF unparked_count > 0 THEN
            PERFORM pg_notify('jobqueue_outbox', '');
        END IF;
    END IF;
END
$claim$;

-- A key's turn, given by the maintenance leader where no claim gave it: each key of
-- p_queues with parked jobs and no id in line (its ready job was cancelled, or a claim
-- could not take its lock) gets its first parked job unparked, as the claim does. Keys
-- an enqueue or a claim holds are left for the next round. Returns how many were unparked.
CREATE OR REPLACE FUNCTION queue_release_stalled_keys_v2(p_queues text[], p_lock_class integer, p_limit integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $release$
DECLARE
    locked_keys integer[];
    unparked_count integer;
BEGIN
    locked_keys := ARRAY(
        SELECT k.h FROM (SELECT DISTINCT hashtext(p.queue || '/' || p.concurrency_key) AS h
                           FROM queue_app_jobs p
                          WHERE p.parked AND p.status = 'queued' AND p.queue = ANY(p_queues)
                          LIMIT p_limit) AS k
         WHERE pg_try_advisory_xact_lock(p_lock_class + 1, k.h)
         ORDER BY k.h
    );
    IF cardinality(locked_keys) = 0 THEN
        RETURN 0;
    END IF;
    BEGIN
        WITH keys AS (
            SELECT DISTINCT p.queue, p.concurrency_key AS key
              FROM queue_app_jobs p
             WHERE p.parked AND p.status = 'queued' AND p.queue = ANY(p_queues)
               AND hashtext(p.queue || '/' || p.concurrency_key) = ANY(locked_keys)
        ), next AS (
            SELECT (SELECT p.id FROM queue_app_jobs p
                     WHERE p.queue = keys.queue AND p.concurrency_key = keys.key
                       AND p.parked AND p.status = 'queued'
                     ORDER BY p.priority_value DESC, p.enqueued_at
                     LIMIT 1) AS id
              FROM keys
             WHERE NOT EXISTS (SELECT FROM queue_app_jobs u
                                WHERE u.queue = keys.queue AND u.concurrency_key = keys.key
                                  AND u.status = 'queued' AND NOT u.parked AND u.concurrency_key IS NOT NULL
                                  AND (u.next_retry_at IS NULL OR u.next_retry_at <= now()))
        ), unparked AS (
            UPDATE queue_app_jobs SET parked = false, enqueued_at = clock_timestamp()
              FROM next
             WHERE queue_app_jobs.id = next.id AND queue_app_jobs.parked AND queue_app_jobs.status = 'queued'
         RETURNING queue_app_jobs.id, queue_app_jobs.queue
        ), sent AS (
            -- No member: the relay places the job by its state (its enqueued_at now).
            INSERT INTO queue_app_job_outbox (job_id, action, queue, member)
            SELECT unparked.id, 'enqueue', unparked.queue, '' FROM unparked
            RETURNING 1
        )
        SELECT count(*) INTO unparked_count FROM sent;
        IF unparked_count > 0 THEN
            PERFORM pg_notify('jobqueue_outbox', '');
        END IF;
    END;
    RETURN unparked_count;
END
$release$;
