"""Mirrors ``celery.utils``: only what task modules import from it (``log``)."""
