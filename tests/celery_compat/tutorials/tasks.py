# Celery's "First Steps with Celery" tutorial, tasks.py
# (https://docs.celeryq.dev/en/stable/getting-started/first-steps-with-celery.html),
# unchanged but for its import (was: from celery import Celery).
# Kept as the tutorial prints it:
# fmt: off
from queue_app.contrib.celery import Celery

app = Celery('tasks', broker='pyamqp://guest@localhost//')

@app.task
def add(x, y):
    return x + y
