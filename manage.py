#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 - loads the settings, which check the environment
    except ImproperlyConfigured as error:
        # A setting the environment gets wrong: its message says what to do; a traceback would not.
        sys.exit(f"manage.py: {error}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
