"""Failed logins and failed token checks, counted per client and limited.

One counter per client address (the same identity as the throttles, see
NUM_PROXIES) in the cache, for a fixed window: once it reaches the limit of
AUTH_FAILURE_RATE, further attempts from that client are refused without
checking the credentials until the window ends. Token checks answer 429;
password logins (the admin's and /api/auth/login/) go through Django's
``authenticate()``, where the backend refuses before checking the password,
so the form reports a failed login.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_login_failed
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle

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
    if (cache.get(key) or 0) < limit[0]:
        return None
    return max(int(cache.ttl(key) or limit[1]), 1)


def record_failure(request: HttpRequest) -> None:
    limit = _limit()
    if limit is None:
        return
    key = _key(request)
    # The window starts with the first failure; add() is a no-op when it already runs.
    cache.add(key, 0, timeout=limit[1])
    cache.incr(key)


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


class LimitedTokenAuthentication(TokenAuthentication):
    """Token authentication that counts wrong tokens and refuses a client over the limit."""

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
            record_failure(request)
            raise
