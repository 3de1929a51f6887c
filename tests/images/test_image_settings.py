"""The image settings read from the environment fail loudly on bad values."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_settings(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "FILE_UPLOAD"))}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import gateway_project.settings as s; print(s.STORAGES['default']['BACKEND'])",
        ],
        cwd=ROOT,
        env={**clean, "DEBUG": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_default_storage_is_the_file_system():
    result = load_settings()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "django.core.files.storage.FileSystemStorage"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"GATEWAY_IMAGE_STORAGE": "ftp"}, "GATEWAY_IMAGE_STORAGE"),
        ({"GATEWAY_MAX_UPLOAD_BYTES": "25MB"}, "GATEWAY_MAX_UPLOAD_BYTES"),
        ({"GATEWAY_MAX_EDIT_IMAGES": "0"}, "GATEWAY_MAX_EDIT_IMAGES"),
        ({"GATEWAY_IMAGE_URL_TTL_SECONDS": "10"}, "GATEWAY_IMAGE_URL_TTL_SECONDS"),
    ],
)
def test_a_bad_image_setting_stops_the_start_naming_the_variable(env, named):
    result = load_settings(**env)
    assert result.returncode != 0
    assert named in result.stderr


def test_s3_storage_needs_django_storages_or_a_bucket():
    result = load_settings(GATEWAY_IMAGE_STORAGE="s3")
    assert result.returncode != 0
    assert "django-storages" in result.stderr or "GATEWAY_S3_BUCKET" in result.stderr
