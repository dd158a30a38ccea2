"""Redis layout and exact priority ordering: (priority desc, enqueue time asc), FIFO within one value."""

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queue_app import broker

# Every enqueue time the API accepts: enqueue time is now (after 2020) or a run_at, which
# enqueue refuses after the last exact time (tested in test_enqueue and the API tests).
START = datetime(2020, 1, 1, tzinfo=UTC)
LATEST = datetime(2305, 6, 5, 23, 47, 34, 740991, tzinfo=UTC)  # 2020-01-01 + (2**53 - 1) µs
times = st.datetimes(min_value=START.replace(tzinfo=None), max_value=LATEST.replace(tzinfo=None)).map(
    lambda moment: moment.replace(tzinfo=UTC)
)
# Within about a second of each other: where float64 precision runs out first.
ONE_SECOND = 10**6
nearby = st.integers(-ONE_SECOND, ONE_SECOND)
# django.tasks' range (the REST API's tiers are 10, 0 and -10 in it).
priorities = st.integers(-100, 100)

pytestmark = pytest.mark.redis


def original_score(tier: int, moment: datetime) -> float:
    """The original system's score: tier weight plus time/1e12."""
    return tier * 1000 + moment.timestamp() / 1e12


def push(client, jobs) -> None:
    """Make (id, priority, enqueue time) jobs ready, as the relay does."""
    broker.apply(
        client,
        [
            broker.Intent(
                "enqueue",
                job_id,
                "default",
                False,
                broker.ready_score(priority),
                broker.ready_member(job_id, at),
            )
            for job_id, priority, at in jobs
        ],
    )


def test_original_scoring_ties_jobs_one_millisecond_apart():
    first = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    second = first + timedelta(milliseconds=1)
    assert original_score(1, first) == original_score(1, second)  # the bug we fix
    assert broker.ready_member("b", first) < broker.ready_member("a", second)


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (START, "0000000000000000:job"),
        # 2020-01-01 to 2026-11-29 is 2524 days (2020 and 2024 are leap years: 6 * 365 + 2 = 2192
        # to 2026-01-01, then 304 to November 1st and 28 more); + 12 h:
        # (2524 * 86400 + 43200) s = 218_116_800 s = 218_116_800_000_000 µs.
        (datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC), "0218116800000000:job"),
        (datetime(2026, 11, 29, 12, 0, 0, 1, tzinfo=UTC), "0218116800000001:job"),
        (LATEST, "9007199254740991:job"),  # 2**53 - 1: still 16 digits, still an exact float
        (START - timedelta(days=1), "0000000000000000:job"),  # before 2020 clamps to the epoch
    ],
)
def test_member_is_16_digit_microseconds_since_2020_then_the_id(moment, expected):
    assert broker.ready_member("job", moment) == expected
    assert broker.member_job_id(expected) == "job"
    assert broker.LATEST_EXACT_TIME == LATEST
    assert broker.enqueue_order_score(LATEST) == 2**53 - 1


@pytest.mark.parametrize(("priority", "score"), [(100, -100.0), (10, -10.0), (0, 0.0), (-100, 100.0)])
def test_score_is_the_negated_priority_so_the_highest_pops_first(priority, score):
    assert broker.ready_score(priority) == score


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(priority_a=priorities, priority_b=priorities, moment=times, offset=nearby)
def test_two_jobs_about_a_second_apart_pop_by_priority_then_time(
    redis_client, priority_a, priority_b, moment, offset
):
    later = min(max(moment + timedelta(microseconds=offset), START), LATEST)
    redis_client.delete(broker.priority_key("default"))
    # Id order disagrees with enqueue order, so only the layout can pop them right.
    first, second = ("b-first", priority_a, moment), ("a-second", priority_b, later)
    push(redis_client, [first, second])
    popped = broker.reserve(redis_client, "default", False, 2)
    if (priority_a, moment) == (priority_b, later):
        assert sorted(popped) == ["a-second", "b-first"]  # one instant, one priority: either order
    else:
        expected = sorted([first, second], key=lambda job: (-job[1], job[2]))
        assert popped == [job_id for job_id, _, _ in expected]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    jobs=st.lists(
        st.tuples(st.sampled_from([-100, -1, 0, 1, 2, 10, 20, 100]), nearby), min_size=1, max_size=30
    ),
    moment=times,
)
def test_many_jobs_pop_in_priority_order_and_fifo_within_one_value(redis_client, jobs, moment):
    """Several jobs per value (20 before 10 before 2, as Django's tests expect), pushed out of order."""
    redis_client.delete(broker.priority_key("default"))
    # Distinct enqueue times (enqueue spaces one call's jobs a microsecond apart).
    placed = {}
    for index, (priority, offset) in enumerate(jobs):
        at = min(max(moment + timedelta(microseconds=offset * 64 + index), START), LATEST)
        placed[f"job-{len(jobs) - index:03d}"] = (priority, at)
    push(redis_client, [(job_id, priority, at) for job_id, (priority, at) in reversed(placed.items())])
    popped = broker.reserve(redis_client, "default", False, len(jobs))
    assert sorted(popped) == sorted(placed)
    order = [(-placed[job_id][0], placed[job_id][1]) for job_id in popped]
    assert order == sorted(order)


@settings(max_examples=200, deadline=None)
@given(moment=times, micros=st.integers(1, ONE_SECOND))
def test_one_microsecond_apart_is_a_different_place(moment, micros):
    later = moment + timedelta(microseconds=micros)
    if later <= LATEST:
        # "z" sorts after "a": the time alone must decide.
        assert broker.ready_member("z", moment) < broker.ready_member("a", later)


def test_jobs_of_one_priority_one_millisecond_apart_pop_in_enqueue_order(redis_client):
    base = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    ids = [f"job-{i:03d}" for i in range(200)]
    # Add in reverse id order so id order cannot produce the right answer by luck.
    push(
        redis_client,
        [(job_id, 7, base + timedelta(milliseconds=i)) for i, job_id in reversed(list(enumerate(ids)))],
    )
    popped = broker.reserve(redis_client, "default", False, 500)
    assert popped == ids


def test_ready_heads_name_the_first_id_of_each_priority_value(redis_client):
    base = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    push(
        redis_client,
        [
            ("p5-old", 5, base),
            ("p5-new", 5, base + timedelta(seconds=1)),
            ("p0-new", 0, base + timedelta(seconds=2)),
            ("p0-old", 0, base - timedelta(seconds=1)),
            ("pm7", -7, base + timedelta(seconds=3)),
        ],
    )
    heads = broker.ready_heads(redis_client, [("default", False)])
    assert heads == ["p5-old", "p0-old", "pm7"]


def test_take_due_moves_each_id_once(redis_client):
    past = datetime.now(UTC) - timedelta(seconds=5)
    future = datetime.now(UTC) + timedelta(hours=1)
    broker.apply(
        redis_client,
        [broker.Intent("schedule", f"due-{i}", "default", False, broker.due_score(past)) for i in range(50)]
        + [broker.Intent("schedule", "later", "default", False, broker.due_score(future))],
    )
    first = broker.take_due(redis_client, "default", limit=30)
    second = broker.take_due(redis_client, "default", limit=30)
    assert len(first) == 30 and len(second) == 20 and not set(first) & set(second)
    assert redis_client.zrange(broker.retry_key("default"), 0, -1) == ["later"]


def test_keys_share_a_cluster_hash_tag():
    keys = [broker.priority_key("mail"), broker.fifo_key("mail"), broker.retry_key("mail")]
    assert keys == ["queue:{mail}:priority", "queue:{mail}:fifo", "queue:{mail}:retry"]


def test_remove_takes_an_id_out_of_the_sorted_sets(redis_client):
    member = broker.ready_member("x", datetime(2026, 1, 1, tzinfo=UTC))
    broker.apply(redis_client, [broker.Intent("enqueue", "x", "q", False, 5.0, member)])
    broker.apply(redis_client, [broker.Intent("schedule", "y", "q", False, 9.0)])
    broker.apply(redis_client, [broker.Intent("remove", "x", "q", False, None, member)])
    broker.apply(redis_client, [broker.Intent("remove", "y", "q", False, None)])
    assert redis_client.keys() == [broker.wake_key("q")]  # only the wake token is left


def test_schedule_and_remove_never_walk_a_fifo_list(redis_client):
    """LREM is O(list length): on a long list each cancel or retry would block Redis.
    A scheduled (retried) id was popped, so it is not in the list; a removed one stays,
    for the claim to drop and the reconciler to prune."""
    broker.apply(redis_client, [broker.Intent("enqueue", job_id, "q", True, None) for job_id in "xyz"])
    broker.apply(
        redis_client,
        [broker.Intent("schedule", "x", "q", True, 9.0), broker.Intent("remove", "y", "q", True, None)],
    )
    assert redis_client.lrange(broker.fifo_key("q"), 0, -1) == ["x", "y", "z"]
    assert redis_client.zrange(broker.retry_key("q"), 0, -1) == ["x"]


def test_wait_for_work_blocks_then_returns_nothing(redis_client):
    assert broker.wait_for_work(redis_client, ["default"], timeout=0.1) is False


def test_an_arrival_wakes_a_waiting_worker(redis_client):
    broker.apply(redis_client, [broker.Intent("enqueue", "x", "default", False, 5.0)])
    assert broker.wait_for_work(redis_client, ["default"], timeout=0.1) is True


@pytest.mark.parametrize("fifo", [True, False])
def test_a_worker_woken_while_waiting_holds_the_new_ids_when_its_wait_returns(redis_client, fifo):
    # The pop goes out with the wait and runs the moment the wake token arrives.
    arrive = threading.Timer(0.3, broker.apply, [redis_client, in_order_intents(fifo)[:2]])
    arrive.start()
    try:
        assert broker.wait_and_reserve(redis_client, "q", fifo, 5, timeout=10) == ["id-0", "id-1"]
    finally:
        arrive.cancel()
    assert sorted(redis_client.zrange(broker.inflight_key("q"), 0, -1)) == ["id-0", "id-1"]
    assert redis_client.llen(broker.wake_key("q")) == 0


def test_a_wait_that_times_out_pops_nothing_from_an_empty_queue(redis_client):
    assert broker.wait_and_reserve(redis_client, "q", False, 5, timeout=0.1) == []
    assert redis_client.zcard(broker.inflight_key("q")) == 0


def test_a_wait_and_pop_after_redis_lost_its_scripts_still_pops(redis_client):
    broker.apply(redis_client, in_order_intents(False))
    redis_client.script_flush()
    assert broker.wait_and_reserve(redis_client, "q", False, 2, timeout=1) == ["id-0", "id-1"]
    assert broker.wait_and_reserve(redis_client, "q", False, 2, timeout=1) == ["id-2", "id-3"]


def member_of(i: int) -> str:
    return broker.ready_member(f"id-{i}", datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i))


def in_order_intents(fifo: bool) -> list:
    """id-0 .. id-4, in pop order: falling priorities, and two of one priority in time order."""
    priorities = [5, 4, 4, 0, -3]
    return [
        broker.Intent("enqueue", f"id-{i}", "q", fifo, broker.ready_score(priorities[i]), member_of(i))
        for i in range(5)
    ]


@pytest.mark.parametrize("fifo", [True, False])
def test_a_late_acknowledgement_leaves_a_later_pop_of_the_same_id_in_flight(redis_client, fifo):
    """Issue 30 item 5: worker A popped an id; it went back in line (A's claim held it back,
    or a sweep returned it) and worker B popped it again. A's acknowledgement, sent late,
    names A's pop: B's in-flight entry stays, so B can still put the id back."""
    broker.apply(redis_client, in_order_intents(fifo))
    first = broker.reserve(redis_client, "q", fifo, 1)
    assert broker.put_back(redis_client, "q", fifo, first) == 1
    second = broker.reserve(redis_client, "q", fifo, 1)
    assert first == second == ["id-0"] and first.tokens != second.tokens
    broker.acknowledge(redis_client, {"q": first.pairs()})  # A's, late
    assert redis_client.zscore(broker.inflight_key("q"), "id-0") is not None
    # Riding on a pop, too: A's next pop carries the late acknowledgement.
    broker.reserve(redis_client, "q", fifo, 0, acknowledge=first.pairs())
    assert redis_client.zscore(broker.inflight_key("q"), "id-0") is not None
    broker.acknowledge(redis_client, {"q": second.pairs()})  # B's own
    assert redis_client.zscore(broker.inflight_key("q"), "id-0") is None


@pytest.mark.parametrize("fifo", [True, False])
def test_a_pop_moves_ids_in_flight_until_acknowledged(redis_client, fifo):
    broker.apply(redis_client, in_order_intents(fifo))
    popped = broker.reserve(redis_client, "q", fifo, 3)
    assert popped == ["id-0", "id-1", "id-2"]
    assert sorted(redis_client.zrange(broker.inflight_key("q"), 0, -1)) == ["id-0", "id-1", "id-2"]
    broker.acknowledge(redis_client, {"q": popped.pairs()})
    assert redis_client.zcard(broker.inflight_key("q")) == 0
    assert not redis_client.exists(broker.inflight_places_key("q"))
    # Nothing expired: a sweep moves nothing.
    assert broker.return_expired(redis_client, "q", fifo) == 0


@pytest.mark.parametrize("fifo", [True, False])
def test_unacknowledged_ids_go_back_in_their_place_after_the_deadline(redis_client, monkeypatch, fifo):
    broker.apply(redis_client, in_order_intents(fifo))
    monkeypatch.setattr("queue_app.broker.ready.INFLIGHT_SECONDS", 0)
    assert broker.reserve(redis_client, "q", fifo, 2) == ["id-0", "id-1"]  # then the worker dies
    assert broker.return_expired(redis_client, "q", fifo) == 2
    assert broker.return_expired(redis_client, "q", fifo) == 0  # each id moves once
    if not fifo:
        # Its old score and member: id-1 has a lower priority than id-0, and pops after it.
        assert redis_client.zscore(broker.priority_key("q"), member_of(1)) == -4.0
    assert redis_client.zcard(broker.inflight_key("q")) == 0
    # Back at the front, in the order they were popped.
    assert broker.reserve(redis_client, "q", fifo, 5) == [f"id-{i}" for i in range(5)]


@pytest.mark.parametrize("limit", [1000, 1])
def test_expired_fifo_pops_go_back_in_line_order_not_id_order(redis_client, monkeypatch, limit):
    """The ids of one pop share its deadline: tied scores would sort them by id, so a
    retried job (an older, smaller id, promoted to the tail) would jump the line."""
    monkeypatch.setattr("queue_app.broker.ready.INFLIGHT_SECONDS", 0)
    line = ["n1", "n2", "a-retried", "n0"]
    redis_client.rpush(broker.fifo_key("q"), *line)
    assert broker.reserve(redis_client, "q", True, 3) == line[:3]
    assert broker.reserve(redis_client, "q", True, 3) == line[3:]  # a second worker; both die
    while broker.return_expired(redis_client, "q", True, limit=limit):
        pass
    assert redis_client.lrange(broker.fifo_key("q"), 0, -1) == line


def test_a_later_fifo_pop_sorts_after_every_id_in_flight(redis_client, monkeypatch):
    """Pops microseconds apart (or with another INFLIGHT_SECONDS) would interleave their
    deadlines: a later pop's ids score above the earlier ones, so a sweep keeps the line."""
    line = ["n1", "n2", "n3"]
    redis_client.rpush(broker.fifo_key("q"), *line)
    monkeypatch.setattr("queue_app.broker.ready.INFLIGHT_SECONDS", 0.2)
    assert broker.reserve(redis_client, "q", True, 2) == line[:2]
    monkeypatch.setattr("queue_app.broker.ready.INFLIGHT_SECONDS", 0)
    assert broker.reserve(redis_client, "q", True, 2) == line[2:]
    time.sleep(0.3)
    assert broker.return_expired(redis_client, "q", True) == 3
    assert redis_client.lrange(broker.fifo_key("q"), 0, -1) == line
