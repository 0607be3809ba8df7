"""Each package's docstring is its table of contents: it names every module and subpackage it holds, so a reader
who opens `__init__.py` knows the folder without listing it (docstrings drifted twice before this test)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT as REPO

PACKAGES = ("foundry", "tasks", "flows", "models")


def packages() -> list[Path]:
    return sorted(init.parent for top in PACKAGES for init in (REPO / top).rglob("__init__.py"))


def parts(package: Path) -> list[str]:
    """The modules (`__main__` aside: it is how the package runs, not what it holds) and subpackages."""
    modules = {p.stem for p in package.glob("*.py")} - {"__init__", "__main__"}
    subpackages = {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    return sorted(modules | subpackages)


@pytest.mark.parametrize("package", packages(), ids=lambda p: str(p.relative_to(REPO)))
def test_a_package_docstring_names_each_module_it_holds(package: Path):
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    unnamed = [name for name in parts(package) if not re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", docstring)]
    assert not unnamed, f"{package.relative_to(REPO)}/__init__.py does not name {unnamed}"
