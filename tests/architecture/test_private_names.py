"""A module's private names (a leading underscore) stay in their module: what two modules share has
a public name in a public home (e.g. api/bodies.py for the bodies /v1/me and /v1/admin share)."""

from __future__ import annotations

import ast

from tests.architecture.test_import_contracts import PACKAGES, ROOT


def private_imports(source: str) -> list[str]:
    """`module.name` for every private name `source` imports from one of the project's packages."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        if node.module.split(".")[0] not in PACKAGES:
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                found.append(f"{node.module}.{alias.name}")
    return found


def test_no_module_imports_another_modules_private_name():
    offenders = {
        str(path.relative_to(ROOT)): names
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if (names := private_imports(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}


def test_a_private_import_from_a_project_module_is_found():
    source = "from api.views import _usage_totals\nfrom api.bodies import usage_totals_body\nimport os\n"
    assert private_imports(source) == ["api.views._usage_totals"]
    assert private_imports("from os.path import _get_sep\n") == []  # another package's business
