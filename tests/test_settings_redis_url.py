"""The test settings point REDIS_URL at the tests' own database number, for any URL form."""

import redis

from queue_app.redis_databases import with_database


def test_unix_socket_url_keeps_its_scheme_and_gets_the_test_db():
    url = with_database("unix:///tmp/jobsite/redis.sock?db=0", "6")
    assert url == "unix:///tmp/jobsite/redis.sock?db=6"
    options = redis.Redis.from_url(url).connection_pool.connection_kwargs
    assert options["path"] == "/tmp/jobsite/redis.sock" and options["db"] == 6


def test_unix_socket_url_without_a_db_gets_one():
    assert with_database("unix:///tmp/jobsite/redis.sock", "7") == "unix:///tmp/jobsite/redis.sock?db=7"


def test_tcp_url_gets_the_test_db():
    url = with_database("redis://127.0.0.1:6379/0", "6")
    assert redis.Redis.from_url(url).connection_pool.connection_kwargs["db"] == 6
