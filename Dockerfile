# One image for every process of the system (web, relay, workers, scheduler, reconciler).
FROM python:3.12-slim
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
RUN DEBUG=1 DATABASE_URL=postgres://unused/unused REDIS_URL=redis://unused:6379/0 \
    python manage.py collectstatic --no-input
EXPOSE 8000
CMD ["gunicorn", "jobsite.wsgi", "--bind", "0.0.0.0:8000", "--workers", "2", "--worker-class", "gthread", "--threads", "4"]
