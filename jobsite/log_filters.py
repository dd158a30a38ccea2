"""Logging filters for the project's console."""

import logging


class WithoutTraceback(logging.Filter):
    """Keeps the record's message and drops its traceback (for errors the client caused)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True
