"""Handler registration for queue_app itself: the demo types, only when the settings ask."""

from queue_app import conf

if conf.project_setting("DEMO_JOB_TYPES"):
    from queue_app import demo  # noqa: F401 - registers demo.echo, demo.sleep, demo.fail
