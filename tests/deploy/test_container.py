"""The Dockerfile builds an image that serves: built on a base made from Debian's packages (no
registry image can be pulled here), migrated and configured with the image's own commands against a
fresh PostgreSQL database and the test Redis, then called with the official SDK on the demo upstream
with keys `createapikey` made.

PostgreSQL only: the container uses the server the tests use (database `<test database>_container`),
on the host's network. Skipped, with the daemon's own words, only when no Docker engine can start.
About 1.5 to 3 minutes on 2 cores, most of it debootstrap's downloads and unpacking; the build
(pip from the index) ~15 s, starting the daemon, migrating and the calls ~20 s.
"""

from __future__ import annotations

import base64
import os
import socket
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import openai
import psycopg
import pytest
import requests
from psycopg import sql

from tests.docker_engine import DockerEngine, debian_base_image, docker_engine, pip_ca_bundle

ROOT = Path(__file__).resolve().parents[2]
DATABASE_URL = os.environ.get("DATABASE_URL", "")
ON_POSTGRES = urlsplit(DATABASE_URL).scheme in ("postgres", "postgresql", "pgsql")

pytestmark = [
    pytest.mark.container,
    pytest.mark.skipif(
        not ON_POSTGRES, reason="the container is served on the tests' PostgreSQL: needs DATABASE_URL"
    ),
]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def engine() -> Iterator[DockerEngine]:
    with docker_engine() as running:
        yield running


@pytest.fixture(scope="module")
def image(engine: DockerEngine) -> str:
    """The gateway's image, built from the Dockerfile on a Debian base made for this run."""
    base = debian_base_image(engine)
    tag = f"igw-gateway-test:{uuid.uuid4().hex[:12]}"
    args = ["build", "--network", "host", "--build-arg", f"BASE_IMAGE={base}", "--tag", tag]
    ca_bundle = pip_ca_bundle()
    if ca_bundle:
        args += ["--secret", f"id=pip_ca,src={ca_bundle}"]
    if os.environ.get("PIP_INDEX_URL"):
        args += ["--build-arg", f"PIP_INDEX_URL={os.environ['PIP_INDEX_URL']}"]
    engine.run(*args, str(ROOT), timeout=900)
    if not engine.private:
        engine.images.insert(0, tag)
    return tag


@pytest.fixture(scope="module")
def container_database_url() -> Iterator[str]:
    """A fresh database beside the tests' own, dropped afterwards."""
    parts = urlsplit(DATABASE_URL)
    name = f"{parts.path.lstrip('/') or 'gateway'}_container"
    admin_url = urlunsplit(parts._replace(path="/postgres", query=""))

    def recreate(create: bool) -> None:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            if create:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    recreate(create=True)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}", query=""))
    finally:
        recreate(create=False)


@pytest.fixture(scope="module")
def container_env(container_database_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": container_database_url,
        "REDIS_URL": os.environ.get("REDIS_URL", ""),
        "SECRET_KEY": "container-test-secret-key",
        "GATEWAY_KEY_PEPPER": "container-test-key-pepper",
    }


def _env_args(env: dict[str, str]) -> list[str]:
    return [arg for name, value in env.items() for arg in ("--env", f"{name}={value}")]


def _manage(engine: DockerEngine, image: str, env: dict[str, str], *command: str) -> str:
    """`python manage.py COMMAND` in a throwaway container; its standard output."""
    result = engine.run(
        "run", "--rm", "--network", "host", *_env_args(env), image, "python", "manage.py", *command
    )
    return result.stdout


@pytest.fixture(scope="module")
def loaded(engine: DockerEngine, image: str, container_env: dict[str, str]) -> str:
    """The deploy steps before a start: `migrate`, then `loadconfig` (its output)."""
    _manage(engine, image, container_env, "migrate", "--noinput", "-v0")
    return _manage(engine, image, container_env, "loadconfig", "config/demo.toml")


@pytest.fixture(scope="module")
def gateway(engine: DockerEngine, image: str, container_env: dict[str, str], loaded: str) -> Iterator[str]:
    """The image's own command (gunicorn) serving on a free loopback port; yields its base URL."""
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = {
        **container_env,
        "GATEWAY_BIND": f"127.0.0.1:{port}",
        "GATEWAY_PUBLIC_URL": base_url,
        "WEB_CONCURRENCY": "1",
    }
    name = f"igw-gateway-test-{uuid.uuid4().hex[:12]}"
    engine.run("run", "--detach", "--name", name, "--network", "host", *_env_args(env), image)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{base_url}/v1/models", timeout=5).status_code == 401:
                    break
            except requests.ConnectionError:
                pass
            state = engine.run("inspect", "--format", "{{.State.Running}}", name, check=False)
            if state.stdout.strip() != "true" or time.monotonic() > deadline:
                logs = engine.run("logs", name, check=False)
                raise AssertionError(f"the gateway did not serve:\n{(logs.stdout + logs.stderr)[-4000:]}")
            time.sleep(0.3)
        yield base_url
    finally:
        engine.run("rm", "--force", name, check=False)


def test_it_builds_migrates_configures_and_serves_images_and_chat(
    engine: DockerEngine, image: str, container_env: dict[str, str], loaded: str, gateway: str
):
    assert "config/demo.toml: applied" in loaded
    image_key = _manage(engine, image, container_env, "createapikey", "demo", "--group", "Alpha-Image")
    chat_key = _manage(engine, image, container_env, "createapikey", "demo", "--group", "Demo-Chat")
    image_key, chat_key = image_key.strip().splitlines()[-1], chat_key.strip().splitlines()[-1]

    images = openai.OpenAI(base_url=f"{gateway}/v1", api_key=image_key, max_retries=0)
    generated = images.images.generate(
        model="alpha-image-2", prompt="a red fox", size="1024x1024", response_format="b64_json"
    )
    assert base64.b64decode(generated.data[0].b64_json).startswith(PNG_MAGIC)
    # A hosted result: the image's media directory is writable by its user and served back.
    hosted = images.images.generate(model="alpha-image-2", prompt="a red fox", response_format="url")
    served = requests.get(hosted.data[0].url, timeout=10)
    assert served.status_code == 200
    assert served.content.startswith(PNG_MAGIC)

    chat = openai.OpenAI(base_url=f"{gateway}/v1", api_key=chat_key, max_retries=0)
    reply = chat.chat.completions.create(model="demo-chat", messages=[{"role": "user", "content": "Hello"}])
    assert reply.choices[0].message.content
    assert reply.usage.completion_tokens > 0

    # Two images at 0.15 and the chat call's tokens came off the demo account's 10.00.
    me = requests.get(f"{gateway}/v1/me", headers={"Authorization": f"Bearer {chat_key}"}, timeout=10)
    assert me.status_code == 200, me.text
    assert Decimal("9.6") < Decimal(me.json()["balance"]) < Decimal("9.7"), me.json()
    assert me.json()["usage"]["today"]["calls"] == 3
    # The scheduled maintenance (deploy/compose.yaml) runs in the image, and the ledger adds up.
    for command in (
        "release_stale_holds",
        "purge_usage",
        "purge_images",
        "purge_response_items",
        "purge_notifications",
        "check_ledger",
    ):
        _manage(engine, image, container_env, command)


def test_it_answers_json_errors_from_the_image(gateway: str):
    answer = requests.post(f"{gateway}/v1/images/generations", json={"model": "x"}, timeout=10)
    assert answer.status_code == 401
    assert answer.json()["error"]["type"] == "authentication_error"
