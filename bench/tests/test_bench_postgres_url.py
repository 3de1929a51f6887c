"""bench/run.py's gateway reaches the run's PostgreSQL over its Unix socket: the URL it hands the
gateway is one the settings read as that socket's directory and port."""

from __future__ import annotations

from pathlib import Path

from bench import run
from gateway_project.env import database_from_url


def test_it_gives_the_gateway_the_socket_of_the_runs_postgres(tmp_path):
    server = run.Postgres(port=54329, data=tmp_path / "igw bench" / "pg", max_connections=100)

    config = database_from_url("DATABASE_URL", server.url, base_dir=Path("/unused"))

    assert config["HOST"] == str(tmp_path / "igw bench")  # PostgreSQL's -k: the run's directory
    assert config["PORT"] == "54329"  # names the socket file, .s.PGSQL.54329
    assert config["NAME"] == run.DB_NAME
    assert config["USER"] == "postgres"
