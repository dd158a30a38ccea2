"""Redis layout and exact priority ordering."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queue_app import broker

# Every enqueue time the API accepts: enqueue time is now (after 2020) or a run_at, which
# enqueue refuses after the last exact score (tested in test_enqueue and the API tests).
START = datetime(2020, 1, 1, tzinfo=UTC)
LATEST = datetime(2055, 9, 5, 5, 58, 26, 842623, tzinfo=UTC)  # 2020-01-01 + (2**50 - 1) µs
times = st.datetimes(min_value=START.replace(tzinfo=None), max_value=LATEST.replace(tzinfo=None)).map(
    lambda moment: moment.replace(tzinfo=UTC)
)
# Within about a second of each other: where float64 precision runs out first.
ONE_SECOND = 10**6
nearby = st.integers(-ONE_SECOND, ONE_SECOND)
TIERS = [(a, b) for a in range(3) for b in range(3)]

pytestmark = pytest.mark.redis


def original_score(tier: int, moment: datetime) -> float:
    """The original system's score: tier weight plus time/1e12."""
    return tier * 1000 + moment.timestamp() / 1e12


def test_original_scoring_ties_jobs_one_millisecond_apart():
    first = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    second = first + timedelta(milliseconds=1)
    assert original_score(1, first) == original_score(1, second)  # the bug we fix
    assert broker.priority_score(1, first) < broker.priority_score(1, second)


@pytest.mark.parametrize(
    ("tier", "moment", "expected"),
    [
        (0, START, 0),
        # 2020-01-01 to 2026-11-29 is 2524 days (2020 and 2024 are leap years: 6 * 365 + 2 = 2192
        # to 2026-01-01, then 304 to November 1st and 28 more); + 12 h:
        # (2524 * 86400 + 43200) s = 218_116_800 s = 218_116_800_000_000 µs; tier 1 adds 2**50.
        (1, datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC), 1_125_899_906_842_624 + 218_116_800_000_000),
        (1, datetime(2026, 11, 29, 12, 0, 0, 1, tzinfo=UTC), 1_344_016_706_842_625),
        (2, START, 2_251_799_813_685_248),  # 2 * 2**50
        (2, LATEST, 3_377_699_720_527_871),  # 3 * 2**50 - 1, the largest score, below 2**53
    ],
)
def test_score_is_tier_times_2_to_the_50_plus_microseconds_since_2020(tier, moment, expected):
    assert broker.priority_score(tier, moment) == expected
    assert broker.LATEST_EXACT_TIME == LATEST


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(moment=times, offset=nearby)
@pytest.mark.parametrize(("tier_a", "tier_b"), TIERS)
def test_two_jobs_about_a_second_apart_pop_by_tier_then_time(redis_client, tier_a, tier_b, moment, offset):
    later = min(max(moment + timedelta(microseconds=offset), START), LATEST)
    key = broker.priority_key("default")
    redis_client.delete(key)
    # Member order disagrees with enqueue order, so only the score can pop them right.
    first, second = ("b-first", moment, tier_a), ("a-second", later, tier_b)
    broker.apply(
        redis_client,
        [
            broker.Intent("enqueue", name, "default", False, broker.priority_score(tier, at))
            for name, at, tier in (first, second)
        ],
    )
    popped = broker.reserve(redis_client, "default", False, 2)
    if (tier_a, moment) == (tier_b, later):
        assert sorted(popped) == ["a-second", "b-first"]  # one instant, one tier: either order
    else:
        expected = sorted([first, second], key=lambda job: (job[2], job[1]))
        assert popped == [name for name, _, _ in expected]


@settings(max_examples=200, deadline=None)
@given(tier=st.integers(0, 2), moment=times, micros=st.integers(1, ONE_SECOND))
def test_one_microsecond_apart_is_a_different_score(tier, moment, micros):
    later = moment + timedelta(microseconds=micros)
    if later <= LATEST:
        assert broker.priority_score(tier, moment) < broker.priority_score(tier, later)


def test_medium_jobs_one_millisecond_apart_pop_in_enqueue_order(redis_client):
    base = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    ids = [f"job-{i:03d}" for i in range(200)]
    # Add in reverse so member (id) order cannot produce the right answer by luck.
    broker.apply(
        redis_client,
        [
            broker.Intent(
                "enqueue",
                job_id,
                "default",
                False,
                broker.priority_score(1, base + timedelta(milliseconds=i)),
            )
            for i, job_id in reversed(list(enumerate(ids)))
        ],
    )
    popped = broker.reserve(redis_client, "default", False, 500)
    assert popped == ids


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


def test_remove_takes_an_id_out_of_every_structure(redis_client):
    broker.apply(redis_client, [broker.Intent("enqueue", "x", "q", True, None)])
    broker.apply(redis_client, [broker.Intent("enqueue", "x", "q", False, 5.0)])
    broker.apply(redis_client, [broker.Intent("remove", "x", "q", False, None)])
    assert redis_client.keys() == [broker.wake_key("q")]  # only the wake token is left


def test_wait_for_work_blocks_then_returns_nothing(redis_client):
    assert broker.wait_for_work(redis_client, ["default"], timeout=0.1) is False


def test_an_arrival_wakes_a_waiting_worker(redis_client):
    broker.apply(redis_client, [broker.Intent("enqueue", "x", "default", False, 5.0)])
    assert broker.wait_for_work(redis_client, ["default"], timeout=0.1) is True


@pytest.mark.parametrize("fifo", [True, False])
def test_a_pop_moves_ids_in_flight_until_acknowledged(redis_client, fifo):
    broker.apply(redis_client, [broker.Intent("enqueue", f"id-{i}", "q", fifo, float(i)) for i in range(5)])
    assert broker.reserve(redis_client, "q", fifo, 3) == ["id-0", "id-1", "id-2"]
    assert sorted(redis_client.zrange(broker.inflight_key("q"), 0, -1)) == ["id-0", "id-1", "id-2"]
    broker.acknowledge(redis_client, {"q": ["id-0", "id-1", "id-2"]})
    assert redis_client.zcard(broker.inflight_key("q")) == 0
    assert not redis_client.exists(broker.inflight_scores_key("q"))
    # Nothing expired: a sweep moves nothing.
    assert broker.return_expired(redis_client, "q", fifo) == 0


@pytest.mark.parametrize("fifo", [True, False])
def test_unacknowledged_ids_go_back_in_their_place_after_the_deadline(redis_client, monkeypatch, fifo):
    broker.apply(redis_client, [broker.Intent("enqueue", f"id-{i}", "q", fifo, float(i)) for i in range(5)])
    monkeypatch.setattr("queue_app.broker.ready.INFLIGHT_SECONDS", 0)
    assert broker.reserve(redis_client, "q", fifo, 2) == ["id-0", "id-1"]  # then the worker dies
    assert broker.return_expired(redis_client, "q", fifo) == 2
    assert broker.return_expired(redis_client, "q", fifo) == 0  # each id moves once
    if not fifo:
        assert redis_client.zscore(broker.priority_key("q"), "id-1") == 1.0  # its old score
    assert redis_client.zcard(broker.inflight_key("q")) == 0
    # Back at the front, in the order they were popped.
    assert broker.reserve(redis_client, "q", fifo, 5) == [f"id-{i}" for i in range(5)]
