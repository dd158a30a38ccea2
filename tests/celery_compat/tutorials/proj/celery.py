# Celery's "Next Steps" tutorial, proj/celery.py
# (https://docs.celeryq.dev/en/stable/getting-started/next-steps.html),
# unchanged but for its import (was: from celery import Celery).
# Kept as the tutorial prints it:
# fmt: off
from queue_app.contrib.celery import Celery

app = Celery('proj',
             broker='amqp://',
             backend='rpc://',
             include=['proj.tasks'])

# Optional configuration, see the application user guide.
app.conf.update(
    result_expires=3600,
)

if __name__ == '__main__':
    app.start()
