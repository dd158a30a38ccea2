"""Checks of command-line options shared by the management commands."""

from django.core.management.base import CommandError

from queue_app.conf import MAX_SECONDS, queue_settings


def queue_names(option: str, value: str) -> list[str]:
    """The queues a comma-separated option names: at least one, each configured.

    Given but empty (``""``, ``" , "``) is refused, not read as "every queue".
    """
    configured = queue_settings().QUEUES
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in configured]
    if unknown:
        raise CommandError(
            f"{option}: unknown queue(s) {', '.join(unknown)}; configured: {', '.join(configured)}"
        )
    if not names:
        raise CommandError(f"{option}: name at least one queue; configured: {', '.join(configured)}")
    return names


def seconds(option: str, value: float) -> None:
    """An interval option: greater than 0 and at most MAX_SECONDS, so finite (NaN fails
    every comparison; infinity or 1e300 would overflow the sleep that uses it)."""
    if not 0 < value <= MAX_SECONDS:
        raise CommandError(f"{option} must be greater than 0 and at most {MAX_SECONDS}, not {value:g}")
