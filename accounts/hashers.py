"""The password hasher of the console's sign-in: Django's PBKDF2, computed off the event loop."""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher

from core.db import pooled_connection_release_idle
from core.offload import cpu_bound


class OffloadedPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's `pbkdf2_sha256`, unchanged (same algorithm name, same stored hashes), with the hash
    computed by `cpu_bound`: one sign-in costs ~0.65 s of PBKDF2, which on a gevent worker would stop
    every other call of the process for that long. hashlib releases the GIL while it hashes, so the
    worker's other calls keep running. Verifying, upgrading and the dummy hash Django computes for an
    unknown username all go through `encode`. The hash holds no pooled database connection: it gives
    its own back first (the sign-in's user was read already; its next query takes one again)."""

    def encode(self, password: str, salt: str, iterations: int | None = None) -> str:
        pooled_connection_release_idle()
        return cpu_bound(super().encode, password, salt, iterations)
