"""A self-signed certificate (for 127.0.0.1 unless told), made with the openssl command (Debian's),
for servers the tests run over TLS."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed_certificate(directory: Path, *, name: str = "IP:127.0.0.1") -> tuple[Path, Path]:
    """Write `cert.pem` and `key.pem` (valid for a day, for `name`, a subjectAltName entry such as
    "IP:127.0.0.1" or "DNS:host.test") into `directory`."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=localhost", "-addext", f"subjectAltName={name}"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
