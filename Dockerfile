FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    GATEWAY_BIND=0.0.0.0:8000 WEB_CONCURRENCY=2 GUNICORN_THREADS=256

WORKDIR /app
RUN useradd --create-home --uid 10001 gateway

COPY pyproject.toml README.md ./
COPY gateway_project ./gateway_project
COPY core ./core
COPY accounts ./accounts
COPY keys ./keys
COPY groups ./groups
COPY billing ./billing
COPY upstreams ./upstreams
COPY api ./api
COPY images ./images
COPY console ./console
COPY configuration ./configuration
COPY templates ./templates
COPY static ./static
COPY config ./config
COPY manage.py gunicorn.conf.py ./

RUN pip install --no-cache-dir . \
    && DEBUG=1 python manage.py collectstatic --noinput -v0

USER gateway
EXPOSE 8000
# Run migrations as a separate step of the deploy (python manage.py migrate), not at every start.
CMD ["gunicorn", "--config", "gunicorn.conf.py", "gateway_project.wsgi"]
