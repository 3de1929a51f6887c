"""The apps' import direction (pyproject.toml, [tool.importlinter]) holds, and breaking it fails
`make lint`: a copy of the tree where a domain app imports an endpoint app is refused."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "gateway_project",
    "core",
    "accounts",
    "keys",
    "groups",
    "billing",
    "upstreams",
    "api",
    "images",
    "chat",
    "console",
    "configuration",
    "monitoring",
    "translators",
    "notifications",
)
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _tree_copy(destination: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, destination / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", destination / "pyproject.toml")
    return destination


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def clean_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tree_copy(tmp_path_factory.mktemp("tree"))


def test_it_keeps_every_import_contract_of_the_tree(clean_tree: Path) -> None:
    result = _lint(clean_tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


def test_it_fails_when_a_domain_app_imports_an_endpoint_app(tmp_path: Path) -> None:
    tree = _tree_copy(tmp_path)
    (tree / "billing" / "violation.py").write_text("from images.models import ImageModel  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "Domain apps never import endpoint apps BROKEN" in result.stdout
    assert "billing.violation -> images.models" in result.stdout


def test_it_fails_when_the_api_base_imports_an_endpoint_family(tmp_path: Path) -> None:
    tree = _tree_copy(tmp_path)
    (tree / "api" / "violation.py").write_text("import images.pipeline  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "api.violation -> images.pipeline" in result.stdout


@pytest.mark.parametrize(
    ("module", "source", "chain"),
    [
        (
            "accounts/violation.py",
            "from billing.models import Wallet  # noqa\n",
            "accounts.violation -> billing.models",
        ),
        (
            "groups/violation.py",
            "from keys.models import ApiKey  # noqa\n",
            "groups.violation -> keys.models",
        ),
        (
            "translators/violation.py",
            "from chat.families import CHAT  # noqa\n",
            "translators.violation -> chat.families",
        ),
        (
            "billing/violation.py",
            "from notifications.models import Notification  # noqa\n",
            "billing.violation -> notifications.models",
        ),
        (
            "notifications/violation.py",
            "from api.metering import MeteredCall  # noqa\n",
            "notifications.violation -> api.metering",
        ),
    ],
)
def test_it_fails_when_a_domain_circle_comes_back(
    tmp_path: Path, module: str, source: str, chain: str
) -> None:
    tree = _tree_copy(tmp_path)
    (tree / module).write_text(source)
    result = _lint(tree)
    assert result.returncode != 0
    assert chain in result.stdout


def test_it_fails_when_the_settings_import_an_app(tmp_path: Path) -> None:
    tree = _tree_copy(tmp_path)
    settings = tree / "gateway_project" / "settings.py"
    settings.write_text(settings.read_text() + "\nfrom keys.credentials import SCOPES  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "gateway_project.settings -> keys.credentials" in result.stdout


def test_it_fails_when_a_domain_app_imports_drf(tmp_path: Path) -> None:
    tree = _tree_copy(tmp_path)
    (tree / "upstreams" / "violation.py").write_text("from rest_framework.response import Response  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "The domain does not know HTTP" in result.stdout
    assert "upstreams.violation -> rest_framework" in result.stdout


DOMAIN_APPS = ("accounts", "keys", "groups", "billing", "upstreams", "notifications")
HTTP_MODULES = ("django.http", "rest_framework")


def _http_imports(path: Path) -> list[str]:
    """The HTTP modules a source file imports (import-linter names external packages only by their
    top-level name, so django.http is checked here)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level == 0
            else []
        )
        found += [name for name in names if name.startswith(HTTP_MODULES)]
    return found


def test_no_domain_app_imports_django_http_or_drf() -> None:
    """The apps' Django admin modules are pages of the staff site, HTTP by nature (their hooks take the
    request), and stay out of the rule; the domain code next to them is in it."""
    offenders = {
        str(path.relative_to(ROOT)): imports
        for app in DOMAIN_APPS
        for path in sorted((ROOT / app).rglob("*.py"))
        if path.name != "admin.py" and (imports := _http_imports(path))
    }
    assert offenders == {}


def test_the_http_import_check_sees_an_import_of_django_http(tmp_path: Path) -> None:
    module = tmp_path / "violation.py"
    module.write_text("from django.http import JsonResponse  # noqa\nimport rest_framework.request  # noqa\n")
    assert _http_imports(module) == ["django.http", "rest_framework.request"]
