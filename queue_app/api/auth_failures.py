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

import structlog
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.signals import user_login_failed
from django.core.cache import cache
from django.core.exceptions import FieldDoesNotExist, PermissionDenied
from django.db import connection
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle

from queue_app.broker.client import REDIS_ERRORS
from queue_app.engine.sql import prepared

log = structlog.get_logger("queue_app.api")

KEY_PREFIX = "auth-failures:"


def _limit() -> tuple[int, int] | None:
    """(failures allowed, window seconds), or None when the limit is off."""
    rate = settings.AUTH_FAILURE_RATE
    if not rate:
        return None
    count, window = SimpleRateThrottle.parse_rate(SimpleRateThrottle, rate)
    return count, window


def _key(request: HttpRequest) -> str:
    # A WSGI server always sets REMOTE_ADDR; an in-process client may not.
    return KEY_PREFIX + (BaseThrottle().get_ident(request) or "unknown")


def retry_after(request: HttpRequest) -> int | None:
    """Seconds until this client may try again, or None when it may try now."""
    limit = _limit()
    if limit is None:
        return None
    key = _key(request)
    try:
        if (cache.get(key) or 0) < limit[0]:
            return None
        return max(int(cache.ttl(key) or limit[1]), 1)
    except REDIS_ERRORS as exc:
        _unavailable(exc)
        return None


def record_failure(request: HttpRequest) -> None:
    limit = _limit()
    if limit is None:
        return
    key = cache.client.make_key(_key(request))
    # One transaction: the window starts with the first failure (SET NX is a no-op while
    # it runs), and it cannot end between being found open and the count.
    try:
        with cache.client.get_client(write=True).pipeline(transaction=True) as pipe:
            pipe.set(key, 0, ex=limit[1], nx=True).incr(key).execute()
    except REDIS_ERRORS as exc:
        _unavailable(exc)


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
    """One statement for a token key: its user's row, the token's columns and the user's permissions.

    The permissions are the two sets ModelBackend reads with two queries of its
    own (the user's and their groups'), named the same way ("app_label.codename").
    None when the user model has no Django permissions (no PermissionsMixin).
    Every name comes from the models' metadata.
    """
    user_model = get_user_model()
    try:
        user_permissions = user_model._meta.get_field("user_permissions")
        user_groups = user_model._meta.get_field("groups")
    except FieldDoesNotExist:
        return None
    token_model = LimitedTokenAuthentication().get_model()
    group_permissions = Group._meta.get_field("permissions")
    content_type = Permission._meta.get_field("content_type")
    q = connection.ops.quote_name
    user, token = q(user_model._meta.db_table), q(token_model._meta.db_table)
    user_pk = f"{user}.{q(user_model._meta.pk.column)}"
    token_key = f"{token}.{q(token_model._meta.get_field('key').column)}"
    token_created = f"{token}.{q(token_model._meta.get_field('created').column)}"
    token_user = f"{token}.{q(token_model._meta.get_field('user').column)}"
    permission_content_type = f"p.{q(content_type.column)}"
    content_type_pk = f"ct.{q(content_type.target_field.column)}"
    group_of_membership = f"ug.{q(user_groups.m2m_reverse_name())}"
    group_of_permission = f"gp.{q(group_permissions.m2m_column_name())}"
    return f"""
        SELECT {user}.*, {token_key} AS token_key, {token_created} AS token_created,
               ARRAY(
                   SELECT ct.{q("app_label")} || '.' || p.{q("codename")}
                   FROM {q(Permission._meta.db_table)} p
                   JOIN {q(content_type.related_model._meta.db_table)} ct
                     ON {content_type_pk} = {permission_content_type}
                   WHERE p.{q(Permission._meta.pk.column)} IN (
                       SELECT {q(user_permissions.m2m_reverse_name())}
                       FROM {q(user_permissions.m2m_db_table())}
                       WHERE {q(user_permissions.m2m_column_name())} = {user_pk}
                       UNION ALL
                       SELECT gp.{q(group_permissions.m2m_reverse_name())}
                       FROM {q(group_permissions.m2m_db_table())} gp
                       JOIN {q(user_groups.m2m_db_table())} ug
                         ON {group_of_membership} = {group_of_permission}
                       WHERE ug.{q(user_groups.m2m_column_name())} = {user_pk}
                   )
               ) AS permission_names
        FROM {token} JOIN {user} ON {user_pk} = {token_user}
        WHERE {token_key} = %s
    """


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
            cursor.execute(sql, [key])
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
