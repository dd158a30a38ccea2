"""The shop's outside services as its tasks call them: a mail relay, an exchange-rate API
and a payment gateway. A test makes one fail its next calls (``fail_next``), as a real one
does while it is briefly down; the count lives in the cache, which the worker shares."""

from smtplib import SMTPServerDisconnected

from django.core.cache import cache

RATES = {"EUR": 1.08, "GBP": 1.27}


class RateServiceBusy(Exception):
    pass


class PaymentGatewayTimeout(Exception):
    pass


class CardDeclined(Exception):
    pass


def fail_next(service: str, times: int) -> None:
    cache.set(f"shop:fail:{service}", times, timeout=None)


def _failing(service: str) -> bool:
    key = f"shop:fail:{service}"
    if cache.get(key, 0) > 0:
        cache.decr(key)
        return True
    return False


def check_mail_relay() -> None:
    if _failing("mail"):
        raise SMTPServerDisconnected("Connection unexpectedly closed")


def fetch_rate(currency: str) -> float:
    if _failing("rates"):
        raise RateServiceBusy(f"rate service busy, {currency} not fetched")
    return RATES[currency]


def charge(order_id: int, amount_cents: int) -> dict:
    if amount_cents > 100_000:
        raise CardDeclined(f"order {order_id}: card declined")
    if _failing("payments"):
        raise PaymentGatewayTimeout(f"order {order_id}: gateway timed out")
    return {"order": order_id, "charged": amount_cents}
