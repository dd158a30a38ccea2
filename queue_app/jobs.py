"""Handler registration for queue_app itself: the demo types, only when the settings ask."""

from django.conf import settings

if getattr(settings, "DEMO_JOB_TYPES", False):
    from queue_app import demo  # noqa: F401 - registers demo.echo, demo.sleep, demo.fail
