"""PgBouncer (Debian's binary) in transaction mode in front of the test database, on a free loopback
port, with its own ini and userlist in a directory of its own. Tests skip when it is not installed.
PgBouncer refuses to run as root: started by root, it is told to become `nobody` (-u), so its
directory is readable by anyone."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

from tests.listening_process import process_stop

PGBOUNCER = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer",) if os.access(p, os.X_OK)), None
)
# Server connections PgBouncer opens to PostgreSQL for the test database: fewer than the nodes'
# pools hold together, so the nodes' transactions really share them.
SERVER_CONNECTIONS = 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def pgbouncer_serving() -> Iterator[str]:
    """Run PgBouncer until the block ends; yields a DATABASE_URL for the test database through it."""
    db = connection.settings_dict
    user, password = db["USER"], db["PASSWORD"] or ""
    directory = Path(tempfile.mkdtemp(prefix="igw-pgbouncer-"))
    process = None
    try:
        directory.chmod(0o755)
        port = _free_port()
        (directory / "userlist.txt").write_text(f'"{user}" "{password}"\n')
        (directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"{db['NAME']} = host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432} dbname={db['NAME']}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = {'plain' if password else 'trust'}\n"
            f"auth_file = {directory / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {SERVER_CONNECTIONS}\nmax_client_conn = 200\n"
            "logfile =\n"
        )
        for path in directory.iterdir():
            path.chmod(0o644)
        command = [PGBOUNCER, str(directory / "pgbouncer.ini")]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "nobody"]
        log = (directory / "pgbouncer.log").open("wb")
        process = subprocess.Popen(command, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"pgbouncer did not start: {(directory / 'pgbouncer.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.05)
        yield f"postgres://{user}:{password}@127.0.0.1:{port}/{db['NAME']}"
    finally:
        if process is not None:
            process_stop(process)
        shutil.rmtree(directory, ignore_errors=True)
