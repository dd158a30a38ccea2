# Celery's "Next Steps" tutorial, proj/tasks.py, unchanged (it imports only its own app).
# Kept as the tutorial prints it:
# fmt: off
from .celery import app


@app.task
def add(x, y):
    return x + y


@app.task
def mul(x, y):
    return x * y


@app.task
def xsum(numbers):
    return sum(numbers)
