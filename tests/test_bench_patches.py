"""The patches kept in bench/patches/ (changes measured without being made: `bench/run.py --patch`,
`bench/ab.py NAME:patch=FILE`) still apply to the code, so the commands docs/benchmarks.md gives with
them can be run again."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATCHES = sorted((ROOT / "bench" / "patches").glob("*.patch"))


def test_the_bench_keeps_at_least_one_patch():
    assert PATCHES


GIT = shutil.which("git")


@pytest.mark.skipif(GIT is None or not (ROOT / ".git").exists(), reason="needs git and a clone")
@pytest.mark.parametrize("patch", PATCHES, ids=[patch.name for patch in PATCHES])
def test_each_bench_patch_applies_to_the_code(patch):
    assert GIT is not None
    checked = subprocess.run([GIT, "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
