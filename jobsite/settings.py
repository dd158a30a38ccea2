"""Settings, read from the environment (12-factor); the only place that reads it.

DATABASE_URL / REDIS_URL (and CACHE_URL) select the stores; when unset, embedded servers are
started under ``.data/`` (see jobsite/embedded.py), and the cache takes a database of the
queue's Redis of its own. The queue's own settings
live in ``JOBQUEUE`` (defaults and validation in queue_app/conf.py); any key
can be set here as ``JOBQUEUE_<KEY>``.
"""

import math
import os
import re
import sys
from pathlib import Path

import dj_database_url
import structlog
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from jobsite import embedded, envfile
from queue_app.redis_databases import cache_url_beside, is_cluster_url

BASE_DIR = Path(__file__).resolve().parent.parent

# The checkout's .env (written by ./dev up) under the real environment; JOBSITE_ENV_FILE
# names another file, or none when empty.
if env_file := os.environ.get("JOBSITE_ENV_FILE", str(BASE_DIR / ".env")):
    envfile.load(env_file)


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {value!r}.")


def _env_int(name: str, default: int, minimum: int = 0) -> int:
    value = os.environ.get(name, "")
    try:
        number = int(value) if value else default
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be an integer >= {minimum}, not {value!r}.")
    return number


def _env_float(name: str, default: float, maximum: float) -> float:
    """A number above 0 and at most ``maximum``, so never NaN or infinity."""
    value = os.environ.get(name, "")
    try:
        number = float(value) if value else default
    except ValueError:
        number = math.nan
    if not 0 < number <= maximum:
        raise ImproperlyConfigured(f"{name} must be a number > 0 and <= {maximum:g}, not {value!r}.")
    return number


def _env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = _env_bool("DEBUG", False)

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set and DEBUG is off: run ./dev up once (it writes .env with a key), "
            "or set DEBUG=1 for development, or set SECRET_KEY to a long random string."
        )
    SECRET_KEY = "insecure-development-key-only-used-when-DEBUG-is-on"

ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]" if DEBUG else "")
CSRF_TRUSTED_ORIGINS = _env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    # Before the admin: its admin/index.html adds the dashboard link to the admin index.
    "queue_app",
    "jobsite.apps.GuardedAdminConfig",  # django.contrib.admin, every list guarded
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
]
# Extra apps for tests and fault-injection runs (e.g. the probe app under tests/).
INSTALLED_APPS += _env_list("JOBSITE_EXTRA_APPS", "")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Reads an admin action's selection of up to 1,000 jobs, before the CSRF check reads the form.
    "queue_app.admin.selections.JobSelectionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "jobsite.headers.PermissionsPolicyMiddleware",
]

# Content-Security-Policy (Django's own): scripts and styles only from this site's static
# files or with the page's nonce (the dashboard's script, the API docs' inline style), no
# plugins, no framing, forms post only here. Images may be data: URIs (the API docs' icons).
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.NONCE],
    "img-src": [CSP.SELF, "data:"],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}
PERMISSIONS_POLICY = os.environ.get(
    "PERMISSIONS_POLICY",
    "camera=(), microphone=(), geolocation=(), payment=(), usb=()",
)

ROOT_URLCONF = "jobsite.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
            ],
        },
    },
]

WSGI_APPLICATION = "jobsite.wsgi.application"
ASGI_APPLICATION = "jobsite.asgi.application"

# The web server (gunicorn, configured in jobsite/gunicorn_conf.py): processes,
# threads per process (each keeps its client connections alive), how long a
# request may run before its process is replaced, how long an idle keep-alive
# connection stays open, and how long a stopping process may finish requests.
WEB_WORKERS = _env_int("WEB_WORKERS", 2, minimum=1)
WEB_THREADS = _env_int("WEB_THREADS", 4, minimum=1)
WEB_TIMEOUT = _env_int("WEB_TIMEOUT", 30, minimum=1)
WEB_KEEPALIVE = _env_int("WEB_KEEPALIVE", 5, minimum=0)
WEB_GRACEFUL_TIMEOUT = _env_int("WEB_GRACEFUL_TIMEOUT", 30, minimum=0)

# Behind PgBouncer in transaction mode: no server-side cursors, no prepared statements,
# no LISTEN, and the worker name's lock held inside a transaction (queue_app/runtime/worker_name.py).
DATABASE_PGBOUNCER = _env_bool("DATABASE_PGBOUNCER", False)


def _database(url: str, conn_max_age: int) -> dict:
    """A DATABASES entry from a URL, as every connection of this project needs it."""
    database = dj_database_url.parse(url, conn_max_age=conn_max_age)
    options = database.setdefault("OPTIONS", {})
    # A socket directory given as ?host=... belongs in HOST, where every tool looks.
    if not database["HOST"] and "host" in options:
        database["HOST"] = options.pop("host")
    if DATABASE_PGBOUNCER:
        database["DISABLE_SERVER_SIDE_CURSORS"] = True
        options["prepare_threshold"] = None
    return database


DATABASE_URL = os.environ.get("DATABASE_URL") or embedded.postgres_url()
DATABASES = {"default": _database(DATABASE_URL, conn_max_age=0)}
if _env_bool("DATABASE_POOL", True):
    # Checked here: psycopg_pool would refuse them only at the first query.
    pool_min_size = _env_int("DATABASE_POOL_MIN_SIZE", 1)
    pool_max_size = _env_int("DATABASE_POOL_MAX_SIZE", 10, minimum=1)
    if pool_min_size > pool_max_size:
        raise ImproperlyConfigured(
            f"DATABASE_POOL_MIN_SIZE ({pool_min_size}) must not be above "
            f"DATABASE_POOL_MAX_SIZE ({pool_max_size})."
        )
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": pool_min_size,
        "max_size": pool_max_size,
        "timeout": _env_float("DATABASE_POOL_TIMEOUT", 10, maximum=3600),
    }

# A streaming replica (hot standby) of DATABASE_URL's server: the admin's history lists, the
# dashboard, the API's job list and /api/stats/ read it; whatever decides a job's state reads the
# primary (queue_app/replica.py). Kept connections (each page checks its own before it reads),
# not a pool: a pool waits its whole timeout for a replica that is down, where a refused
# connection says so at once and the page reads the primary.
DATABASE_REPLICA_URL = os.environ.get("DATABASE_REPLICA_URL", "")
if DATABASE_REPLICA_URL:
    replica = _database(DATABASE_REPLICA_URL, conn_max_age=60)
    # A replica that does not answer costs a page at most this long before it reads the primary.
    replica["OPTIONS"].setdefault("connect_timeout", 2)
    # Tests read the test database through it, as they would a replica of it.
    replica["TEST"] = {"MIRROR": "default"}
    DATABASES["replica"] = replica
DATABASE_ROUTERS = ["queue_app.replica.ReplicaRouter"]

# A Redis Cluster for the queue is named redis+cluster://host:port[,host:port...]
# (queue_app/broker/client.py).
REDIS_URL = os.environ.get("REDIS_URL") or embedded.redis_url()
# The cache (throttles, auth-failure counters) needs a plain Redis: django-redis has
# no cluster client. By default it uses the queue's server, in the other database of
# its pair (0 <-> 1, 2 <-> 3, ...): cache.clear() empties the cache's whole database,
# which must never hold the queue's keys (queue_app/redis_databases.py).
CACHE_URL = os.environ.get("CACHE_URL") or (
    REDIS_URL if is_cluster_url(REDIS_URL) else cache_url_beside(REDIS_URL)
)
if is_cluster_url(CACHE_URL):
    raise ImproperlyConfigured(
        "CACHE_URL must name a plain Redis (redis://...): the cache cannot use a Redis Cluster. "
        "Set CACHE_URL when REDIS_URL is a redis+cluster:// URL."
    )
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": CACHE_URL,
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.DefaultClient",
            "SOCKET_CONNECT_TIMEOUT": 5,
            "SOCKET_TIMEOUT": 30,
        },
    }
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's ModelBackend, refusing every login of a client with too many recent
# failures (queue_app/api/auth_failures.py).
AUTHENTICATION_BACKENDS = ["queue_app.api.auth_failures.LimitedModelBackend"]
# The project's login pages are the admin's and the API's (/api/auth/login/, for the Swagger UI
# and the browsable API); Django's defaults, /accounts/login/ and /accounts/profile/, are not
# served. A login without ``next`` lands on the API's docs, a page for any user.
LOGIN_URL = "rest_framework:login"
LOGIN_REDIRECT_URL = "docs"
# Failed logins and failed token checks allowed per client address, in DRF's rate form
# (count/period); empty turns the limit off.
AUTH_FAILURE_RATE = os.environ.get("AUTH_FAILURE_RATE", "20/hour")
if AUTH_FAILURE_RATE and not re.fullmatch(r"[0-9]+/(s|m|h|d)[a-z]*", AUTH_FAILURE_RATE):
    raise ImproperlyConfigured(
        f"AUTH_FAILURE_RATE must look like 20/hour (count/second|minute|hour|day), not {AUTH_FAILURE_RATE!r}."
    )

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))

# Security: strict by default, relaxed only by DEBUG or explicit environment.
SECURE_SSL_REDIRECT = _env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = _env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = _env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = _env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = _env_bool("SECURE_HSTS_PRELOAD", False)
if _env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "queue_app.api.auth_failures.LimitedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.UserRateThrottle",
        "rest_framework.throttling.AnonRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": os.environ.get("API_THROTTLE_USER") or None,
        "anon": os.environ.get("API_THROTTLE_ANON") or None,
    },
    # How many proxies in front of the app append to X-Forwarded-For: the client is the
    # address that many entries from the right. 0 (the default) ignores the header, which
    # a client can write anything into, and identifies clients by the socket's address.
    "NUM_PROXIES": _env_int("NUM_PROXIES", 0),
    # One JSON error shape for every error, QueueError subclasses included.
    "EXCEPTION_HANDLER": "queue_app.api.errors.exception_handler",
    # JSON always; the browsable API (HTML) only for development.
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        *(["rest_framework.renderers.BrowsableAPIRenderer"] if DEBUG else []),
    ],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "queue_app.api.negotiation.JSONWhenNothingElseFits",
}
# How many times the API runs an enqueue again after a deadlock or serialization failure
# (a collision with a concurrent request, not an outage) before answering 409.
API_TRANSACTION_RETRIES = _env_int("API_TRANSACTION_RETRIES", 3)
# A CSRF failure under /api/ answers in the API's JSON error shape.
CSRF_FAILURE_VIEW = "queue_app.api.fallbacks.csrf_failure"

SPECTACULAR_SETTINGS = {
    "TITLE": "Job queue API",
    "DESCRIPTION": "Submit, inspect, cancel and retry durable background jobs.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # A job's status, in every component that shows a job (a job, a retried job).
    "ENUM_NAME_OVERRIDES": {"JobStatusEnum": "queue_app.states.Status"},
}

# django.tasks: @task functions run as durable jobs (queue_app/tasks_backend.py).
TASKS = {"default": {"BACKEND": "queue_app.tasks_backend.JobQueueBackend"}}

# Raw JOBQUEUE_<KEY> values; queue_app/conf.py applies defaults and types.
JOBQUEUE = {
    key.removeprefix("JOBQUEUE_"): value for key, value in os.environ.items() if key.startswith("JOBQUEUE_")
}

# demo.echo / demo.sleep / demo.fail (queue_app/demo.py): for trying the system, not for
# production, where any API user could submit them.
DEMO_JOB_TYPES = _env_bool("DEMO_JOB_TYPES", DEBUG)

LOG_FORMAT = os.environ.get("LOG_FORMAT", "console" if sys.stderr.isatty() else "json")
LOG_LEVEL = (os.environ.get("LOG_LEVEL") or "INFO").upper()
if LOG_LEVEL not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
    raise ImproperlyConfigured(
        f"LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not {os.environ['LOG_LEVEL']!r}."
    )

structlog.configure(
    processors=[
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        structlog.processors.JSONRenderer()
        if LOG_FORMAT == "json"
        else structlog.dev.ConsoleRenderer(colors=False),
    ],
    wrapper_class=structlog.make_filtering_bound_logger(LOG_LEVEL),
    # One write per line, so processes sharing stderr never interleave within a line.
    logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
    # Each module's logger is bound once, not again for every call (a filtered-out
    # debug call then costs a no-op call); the test settings turn this off so that
    # structlog.testing.capture_logs sees every logger.
    cache_logger_on_first_use=True,
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"without_traceback": {"()": "jobsite.log_filters.WithoutTraceback"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler"},
        "console_brief": {"class": "logging.StreamHandler", "filters": ["without_traceback"]},
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        # django.tasks' own lines (enqueued / state=RUNNING / state=SUCCESSFUL|FAILED with traceback).
        "django.tasks": {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False},
        # Django's lines once: its default adds a console handler of its own under DEBUG, and
        # the root's printed each 4xx a second time.
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # A refused admin lookup or Host header is the client's mistake: one line, no traceback.
        "django.security": {"handlers": ["console_brief"], "level": "WARNING", "propagate": False},
    },
}
