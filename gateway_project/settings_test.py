"""Test settings: the production settings with fixed secrets and a fast password hasher."""

import os

# Tests never read a developer's .env: they see only what they set (subprocesses inherit this).
os.environ.setdefault("GATEWAY_ENV_FILE", "")
os.environ.setdefault("SECRET_KEY", "test-only-secret-key")
os.environ.setdefault("GATEWAY_KEY_PEPPER", "test-only-key-pepper")

from gateway_project.settings import *  # noqa: F403

# Hashing passwords with PBKDF2 costs ~0.3 s a user; tests create many users.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
MEDIA_ROOT = BASE_DIR / "artifacts" / "test-media"  # noqa: F405
