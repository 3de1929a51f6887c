"""deploy/compose.yaml holds what the README's Production section promises: the gateway built from
the Dockerfile, PostgreSQL, Redis, nginx with deploy/nginx.conf, migrations before the start, and
the maintenance commands on their schedule. Parsed as YAML here; also validated by `docker compose
config` (or the older `docker-compose config`) where one is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
COMPOSE = ROOT / "deploy" / "compose.yaml"
REQUIRED_ENV = {
    "SECRET_KEY": "compose-test",
    "GATEWAY_KEY_PEPPER": "compose-test",
    "POSTGRES_PASSWORD": "compose-test",
    "GATEWAY_CONFIG_FILE": "../config/demo.toml",
}


@pytest.fixture(scope="module")
def services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def _script(service: dict) -> str:
    """A `sh -c` service's script as the shell gets it (compose turns `$$` into `$`)."""
    command = service["command"]
    assert command[:2] == ["sh", "-c"]
    return command[2].replace("$$", "$")


def test_it_has_the_gateway_its_stores_the_proxy_and_the_scheduler(services: dict):
    assert {"gateway", "migrate", "postgres", "redis", "nginx", "scheduler"} <= set(services)
    for name in ("gateway", "migrate", "scheduler"):
        assert services[name]["build"]["context"] == ".."
        assert (COMPOSE.parent / services[name]["build"]["context"] / "Dockerfile").is_file()
        environment = services[name]["environment"]
        assert (
            environment["DATABASE_URL"].startswith("postgres://")
            and "@postgres:5432/" in environment["DATABASE_URL"]
        )
        assert environment["REDIS_URL"].startswith("redis://redis:")
        # No default secret: compose refuses to start without them.
        assert environment["SECRET_KEY"].startswith("${SECRET_KEY:?")
        assert environment["GATEWAY_KEY_PEPPER"].startswith("${GATEWAY_KEY_PEPPER:?")
    assert "./nginx.conf:/srv/nginx/image-gateway.conf:ro" in services["nginx"]["volumes"]
    assert services["nginx"]["depends_on"]["gateway"]["condition"] == "service_healthy"
    assert "ports" not in services["gateway"]  # only nginx faces clients


def test_it_migrates_and_loads_the_configuration_before_the_gateway_starts(services: dict):
    script = _script(services["migrate"])
    assert script.index("manage.py migrate") < script.index("manage.py loadconfig")
    assert services["migrate"]["restart"] == "no"
    for name in ("gateway", "scheduler"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_it_schedules_the_maintenance_commands(services: dict):
    script = _script(services["scheduler"])
    for command in (
        "release_stale_holds",
        "purge_usage",
        "purge_images",
        "purge_response_items",
        "purge_notifications",
    ):
        assert f"python manage.py {command}" in script
    assert "sleep 300" in script  # a round every 5 minutes: release_stale_holds
    assert "round % 288" in script  # 288 rounds = 24 h: the purges
    subprocess.run(["sh", "-n", "-c", script], check=True, timeout=10)  # the shell can parse it


def test_it_runs_the_notification_worker_from_the_gateways_image(services: dict):
    worker = services["notifications"]
    assert worker["command"] == "python manage.py deliver_notifications"
    assert worker["image"] == services["gateway"]["image"] and worker["build"]["context"] == ".."
    assert worker["environment"]["DATABASE_URL"] == services["gateway"]["environment"]["DATABASE_URL"]
    assert worker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "ports" not in worker


def test_it_is_valid_for_docker_compose_where_installed():
    env = {**os.environ, **REQUIRED_ENV}
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True, check=False).returncode == 0
    ):
        command = [docker, "compose"]
    elif shutil.which("docker-compose"):
        command = ["docker-compose"]
    else:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed: checked as YAML only")
    result = subprocess.run(
        [*command, "-f", str(COMPOSE), "config", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_nginx_runs_deploy_nginx_conf_pointed_at_the_gateway_service_without_tls(services: dict):
    script = _script(services["nginx"])
    rendered = subprocess.run(
        ["sh", "-c", script.split(" > ")[0].replace("/srv/nginx/image-gateway.conf", str(NGINX_CONF))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "server gateway:8000;" in rendered and "127.0.0.1:8000" not in rendered
    assert "ssl" not in rendered and "443" not in rendered
    assert "> /etc/nginx/conf.d/default.conf" in script and "exec nginx -g 'daemon off;'" in script
    assert "static:/srv/image-gateway/staticfiles:ro" in services["nginx"]["volumes"]
    assert "alias /srv/image-gateway/staticfiles/;" in rendered
