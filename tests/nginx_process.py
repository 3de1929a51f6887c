"""nginx (Debian's binary) running deploy/nginx.conf in front of gateway nodes, on loopback, as a
process of the test's own: its own prefix directory, pid file, error log and temporary files, so it
needs no root and touches nothing of a system nginx. Tests skip when nginx is not installed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.tls import self_signed_certificate

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "deploy" / "nginx.conf"
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)

# The main context deploy/nginx.conf is included from (Debian's /etc/nginx/nginx.conf in production):
# paths relative to the prefix, enough connections for the tests' floods.
MAIN = """worker_processes 1;
worker_rlimit_nofile 16384;
events {{ worker_connections 8192; }}
http {{
    client_body_temp_path temp/body;
    proxy_temp_path temp/proxy;
    fastcgi_temp_path temp/fastcgi;
    uwsgi_temp_path temp/uwsgi;
    scgi_temp_path temp/scgi;
    access_log {access_log};
    include gateway.conf;
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _replace(pattern: str, replacement: str, text: str, *, count: int = 0) -> str:
    """re.sub that fails when the template no longer has what the tests replace."""
    result, replaced = re.subn(pattern, replacement, text, count=count, flags=re.MULTILINE)
    assert replaced, f"deploy/nginx.conf has no {pattern!r} any more"
    return result


def nginx_conf_render(*, nodes: list[str], port: int, tls_port: int, cert: Path, key: Path) -> str:
    """deploy/nginx.conf with the test's addresses: the gateway nodes (host:port), the plain and TLS
    ports on 127.0.0.1 (no IPv6 listener) and a self-signed certificate."""
    text = TEMPLATE.read_text()
    servers = "".join(f"    server {node};\n" for node in nodes)
    text = _replace(r"^    server 127\.0\.0\.1:8000;\n", servers, text, count=1)
    text = _replace(r"^\s*listen \[::\].*\n", "", text)
    text = _replace(r"listen 80;", f"listen 127.0.0.1:{port} backlog=4096;", text)
    text = _replace(r"listen 443 ssl", f"listen 127.0.0.1:{tls_port} ssl", text)
    text = _replace(r"ssl_certificate /\S+;", f"ssl_certificate {cert};", text)
    return _replace(r"ssl_certificate_key /\S+;", f"ssl_certificate_key {key};", text)


@dataclass
class Nginx:
    url: str
    tls_url: str
    cert: Path
    prefix: Path

    def error_log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def nginx_serving(nodes: list[str], *, access_log: bool = False) -> Iterator[Nginx]:
    """Run nginx with deploy/nginx.conf in front of `nodes` until the block ends."""
    # A directory of its own that nginx's workers can read: started as root, they run as nobody.
    prefix = Path(tempfile.mkdtemp(prefix="igw-nginx-"))
    process = None
    try:
        prefix.chmod(0o755)
        (prefix / "temp").mkdir()
        cert, key = self_signed_certificate(prefix)
        port, tls_port = free_port(), free_port()
        (prefix / "gateway.conf").write_text(
            nginx_conf_render(nodes=nodes, port=port, tls_port=tls_port, cert=cert, key=key)
        )
        (prefix / "nginx.conf").write_text(MAIN.format(access_log="access.log" if access_log else "off"))
        process = subprocess.Popen(
            [
                *(NGINX, "-p", f"{prefix}/", "-c", "nginx.conf", "-e", "error.log"),
                *("-g", "daemon off; pid nginx.pid;"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log = (prefix / "error.log").read_text() if (prefix / "error.log").exists() else ""
                    raise RuntimeError(f"nginx did not start: {log[-2000:]}") from None
                time.sleep(0.05)
        yield Nginx(
            url=f"http://127.0.0.1:{port}", tls_url=f"https://127.0.0.1:{tls_port}", cert=cert, prefix=prefix
        )
    finally:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)  # fast shutdown: the master ends its workers
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        shutil.rmtree(prefix, ignore_errors=True)
