"""The shop's background work, written against Celery's task API: retries with a countdown,
autoretry_for with backoff, bind=True reading self.request, a soft time limit, and expiry.

Only the imports from celery changed; each names what it was.
"""

import time
from smtplib import SMTPServerDisconnected

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.mail import send_mail

from queue_app.contrib.celery import shared_task  # was: from celery import shared_task
from queue_app.contrib.celery.exceptions import SoftTimeLimitExceeded  # was: celery.exceptions
from queue_app.contrib.celery.utils.log import get_task_logger  # was: celery.utils.log
from tests.celery_compat.shop import services

logger = get_task_logger(__name__)


@shared_task(
    bind=True,
    autoretry_for=(SMTPServerDisconnected,),
    retry_backoff=True,
    retry_backoff_max=2,
    max_retries=5,
    queue="mail",
)
def send_welcome_email(self, user_id):
    user = get_user_model().objects.get(pk=user_id)
    services.check_mail_relay()
    send_mail("Welcome to the shop", f"Hello {user.username}!", "shop@example.com", [user.email])
    logger.info("welcome mail sent to %s (task %s)", user.email, self.request.id)
    return {"sent_to": user.email, "task_id": self.request.id, "retries": self.request.retries}


@shared_task(bind=True, max_retries=3)
def refresh_exchange_rate(self, currency):
    try:
        rate = services.fetch_rate(currency)
    except services.RateServiceBusy as exc:
        raise self.retry(exc=exc, countdown=0.5)
    cache.set(f"shop:rate:{currency}", rate, timeout=None)
    return {"currency": currency, "rate": rate, "attempt": self.request.retries + 1}


@shared_task(
    autoretry_for=(services.PaymentGatewayTimeout,),
    retry_kwargs={"max_retries": 2, "countdown": 0.2},
)
def charge_order(order_id, amount_cents):
    return services.charge(order_id, amount_cents)


@shared_task(soft_time_limit=1, time_limit=5)
def rebuild_search_index(batch_size):
    indexed = 0
    try:
        while True:
            time.sleep(0.05)  # one batch
            indexed += batch_size
    except SoftTimeLimitExceeded:
        logger.warning("search index rebuild stopped at its time limit after %d documents", indexed)
        return {"indexed": indexed, "complete": False}


@shared_task(bind=True)
def send_cart_reminder(self, user_id):
    cache.set(f"shop:reminded:{user_id}", self.request.id, timeout=None)
    return user_id
