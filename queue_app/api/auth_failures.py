"""Failed logins and failed token checks, counted per client and limited.

One counter per client address (the same identity as the throttles, see
NUM_PROXIES) in the cache, for a fixed window: once it reaches the limit of
AUTH_FAILURE_RATE, further attempts from that client are refused without
checking the credentials until the window ends. Token checks answer 429;
password logins (the admin's and /api/auth/login/) go through Django's
``authenticate()``, where the backend refuses before checking the password,
so the form reports a failed login. A wrong token sent to an endpoint that needs
no credentials (the health probe) is not counted.

The counters fail open: while the cache's Redis does not answer, failures are
not counted and nobody is refused for them (a wrong token is still a 401), so
an outage of Redis does not lock every client out of PostgreSQL's data.
"""

from __future__ import annotations

import functools
from typing import Any

import redis
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.contrib.auth.signals import user_login_failed
from django.core.cache import DEFAULT_CACHE_ALIAS, cache, caches
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.throttling import BaseThrottle

from queue_app import conf
from queue_app.broker.client import REDIS_ERRORS
from queue_app.engine.sql import prepared, query
from queue_app.observability.logs import get_logger

log = get_logger(__name__)

KEY_PREFIX = "auth-failures:"


def _limit() -> tuple[int, int] | None:
    """(failures allowed, window seconds), or None when the limit is off."""
    return conf.auth_failure_limit()


def _key(request: HttpRequest) -> str:
    # A WSGI server always sets REMOTE_ADDR; an in-process client may not.
    return KEY_PREFIX + (BaseThrottle().get_ident(request) or "unknown")


def _redis(key: str) -> tuple[redis.Redis, str] | None:
    """The cache's Redis client and the key as stored, when the cache is a Redis: django-redis's
    or Django's own backend. None for any other cache, which only the cache API reaches."""
    backend = caches[DEFAULT_CACHE_ALIAS]
    if isinstance(backend, RedisCache):
        # Django's backend has no public way to its client; _cache is its RedisCacheClient.
        return backend._cache.get_client(key, write=True), backend.make_and_validate_key(key)
    client = getattr(backend, "client", None)
    if client is not None and hasattr(client, "get_client"):  # django-redis
        return client.get_client(write=True), client.make_key(key)
    return None


def retry_after(request: HttpRequest) -> int | None:
    """Seconds until this client may try again, or None when it may try now."""
    limit = _limit()
    if limit is None:
        return None
    key = _key(request)
    try:
        if (cache.get(key) or 0) < limit[0]:
            return None
        store = _redis(key)
        # Another cache cannot tell when the window ends: the whole window is the longest wait.
        remaining = store[0].ttl(store[1]) if store else None
        return max(int(remaining or limit[1]), 1)
    except REDIS_ERRORS as exc:
        _unavailable(exc)
        return None


def record_failure(request: HttpRequest) -> None:
    limit = _limit()
    if limit is None:
        return
    key = _key(request)
    try:
        store = _redis(key)
        if store is None:
            _count_with_cache_api(key, window=limit[1])
            return
        client, stored_key = store
        # One transaction: the window starts with the first failure (SET NX is a no-op while
        # it runs), and it cannot end between being found open and the count.
        with client.pipeline(transaction=True) as pipe:
            pipe.set(stored_key, 0, ex=limit[1], nx=True).incr(stored_key).execute()
    except REDIS_ERRORS as exc:
        _unavailable(exc)


def _count_with_cache_api(key: str, *, window: int) -> None:
    """Count with add() and incr() alone (a local-memory cache, memcached, the database): the
    window may end between the two, and then the failure opens a new one."""
    if cache.add(key, 1, timeout=window):
        return
    try:
        cache.incr(key)
    except ValueError:  # the window ended after add() found it open
        cache.add(key, 1, timeout=window)


def _unavailable(exc: BaseException) -> None:
    log.warning("auth_failures_not_counted", error=f"{type(exc).__name__}: {exc}"[:300])


@receiver(user_login_failed)
def _count_failed_login(sender, credentials, request=None, **kwargs) -> None:
    if request is not None:
        record_failure(request)


class LimitedModelBackend(ModelBackend):
    """Django's ModelBackend that refuses every login of a client over the limit, unchecked."""

    def authenticate(self, request: HttpRequest | None, username=None, password=None, **kwargs):
        if request is not None and retry_after(request) is not None:
            # authenticate() stops here and reports a failed login (which is counted too).
            raise PermissionDenied("too many failed logins from this client")
        return super().authenticate(request, username=username, password=password, **kwargs)


def _user_from_row(row: dict) -> Any:
    """The user of a token look-up row, as the ORM would load it (its columns converted by
    their fields); the other columns (token_key, token_created, permission_names) become
    attributes of the user."""
    user_model = get_user_model()
    values = []
    for field in user_model._meta.concrete_fields:
        value = row.pop(field.column)
        for convert in field.get_db_converters(connection):
            value = convert(value, field.get_col(user_model._meta.db_table), connection)
        values.append(value)
    user = user_model.from_db(connection.alias, None, values)
    for name, value in row.items():
        setattr(user, name, value)
    return user


@functools.cache
def _token_lookup_sql() -> str | None:
    """One statement for a token key: its user's row, the token's columns and the user's
    permissions (engine/sql/auth.sql). None unless the models are Django's own user and
    DRF's own token, whose tables it names: DRF's lookup then runs instead."""
    token_model = LimitedTokenAuthentication().get_model()
    if get_user_model() is not User or token_model._meta.label != "authtoken.Token":
        return None
    return query("token_user_with_permissions")


class LimitedTokenAuthentication(TokenAuthentication):
    """Token authentication that counts wrong tokens and refuses a client over the limit.

    The token's lookup also reads its user's permissions, in the same statement,
    so the request's permission checks (``has_perm``) need no query of their own.
    They are read with every request: a permission granted or removed counts
    from the next request.
    """

    def __init__(self, *, counts_failures: bool = True) -> None:
        # Off for endpoints anyone may call without credentials (the health probe): a wrong
        # token sent there is no failed login, so it must not lock the address's real tokens
        # out of the rest of the API. A client already over the limit is still refused
        # unchecked there, so such an endpoint is no way to keep guessing tokens.
        super().__init__()
        self.counts_failures = counts_failures

    def authenticate(self, request):
        # Only requests that present a token are counted and refused: a session user
        # behind the same address (an office NAT) still gets in.
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if header.split(" ", 1)[0].lower() != self.keyword.lower():
            return None
        wait = retry_after(request)
        if wait is not None:
            raise exceptions.Throttled(wait, detail="Too many failed authentications; retry later.")
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            if self.counts_failures:
                record_failure(request)
            raise

    def authenticate_credentials(self, key):
        sql = _token_lookup_sql()
        if sql is None:
            return super().authenticate_credentials(key)
        # Prepared: planning this statement took longer than running it.
        with prepared() as cursor:
            cursor.execute(sql, {"key": key})
            names = [column.name for column in cursor.description]
            row = cursor.fetchone()
        if row is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        user = _user_from_row(dict(zip(names, row, strict=True)))
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        # ModelBackend's own per-user cache of get_all_permissions(). A superuser has
        # every permission without a lookup, so theirs is left for ModelBackend to read.
        if not user.is_superuser:
            user._perm_cache = set(user.permission_names)
        token = self.get_model()(key=user.token_key, user=user, created=user.token_created)
        token._state.adding, token._state.db = False, user._state.db
        return user, token
