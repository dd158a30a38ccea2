# As Celery's "First steps with Django" has proj/__init__.py: the app is made when Django
# loads the settings, so shared_task uses it.
from .celery import app as celery_app

__all__ = ("celery_app",)
