"""Optional bridges from other task libraries' APIs to this queue (``contrib.celery``)."""
