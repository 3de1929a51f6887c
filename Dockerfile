# The gateway under gunicorn with gunicorn.conf.py (README, "Production"). Build with BuildKit:
#
#   DOCKER_BUILDKIT=1 docker build -t image-gateway .
#
# BASE_IMAGE: any Debian-based image with python3 (3.11 or later) and its venv module; the default
# is the official slim image. Where no image registry is reachable, make one from Debian's packages
# (README, "Production": debootstrap + docker import) and pass it with --build-arg BASE_IMAGE=....
# Where PyPI is reached through a proxy with its own certificate authority, mount that CA bundle for
# pip only (it stays out of the image): --secret id=pip_ca,src=/etc/ssl/certs/ca-certificates.crt;
# --build-arg PIP_INDEX_URL=... names another index.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG PIP_INDEX_URL
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH \
    GATEWAY_BIND=0.0.0.0:8000 WEB_CONCURRENCY=2 GUNICORN_THREADS=256 \
    MALLOC_ARENA_MAX=2

WORKDIR /app
# A venv rather than the base's own Python: Debian's python3 refuses `pip install` into the system.
RUN useradd --create-home --uid 10001 gateway && python3 -m venv /opt/venv

# The dependencies first, from pyproject.toml alone: a layer that survives changes to the code.
COPY pyproject.toml ./
RUN --mount=type=secret,id=pip_ca \
    if [ -f /run/secrets/pip_ca ]; then export PIP_CERT=/run/secrets/pip_ca; fi \
    && python -c "import tomllib; d = tomllib.load(open('pyproject.toml', 'rb')); \
        print(*d['project']['dependencies'], *d['build-system']['requires'], sep='\n')" > /tmp/requirements.txt \
    && pip install --no-cache-dir --disable-pip-version-check -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# What is copied is decided by .dockerignore (no tests, docs, .env or local databases).
COPY . .
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps --no-build-isolation . \
    && rm -rf build ./*.egg-info \
    && python manage.py collectstatic --noinput -v0 \
    && mkdir -p media && chown -R gateway staticfiles media

USER gateway
EXPOSE 8000
# Run migrations as a separate step of the deploy (python manage.py migrate), not at every start.
CMD ["gunicorn", "--config", "gunicorn.conf.py", "gateway_project.wsgi"]
