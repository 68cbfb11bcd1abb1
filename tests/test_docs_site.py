"""The documentation site builds with warnings as errors, and its reference covers the public API.

``mkdocs build --strict`` (mkdocs.yml) fails on a broken link or anchor between pages, a
reference to a name griffe cannot find, or a docstring it cannot read. Every name that a public
module exports (its ``__all__``, read from the source) must then have its entry in the generated
reference, so a new public name cannot go undocumented.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "deepcrew_episodic"

# Public module -> its source; integrations and the MCP server are read, never imported.
PUBLIC_MODULES = {
    "deepcrew_episodic": PACKAGE / "__init__.py",
    "deepcrew_episodic.providers": PACKAGE / "providers" / "__init__.py",
    "deepcrew_episodic.testing": PACKAGE / "testing" / "__init__.py",
    "deepcrew_episodic.mcp_server": PACKAGE / "mcp_server" / "__init__.py",
    **{
        f"deepcrew_episodic.integrations.{path.stem}": path
        for path in sorted((PACKAGE / "integrations").glob("[!_]*.py"))
    },
}

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docs_site")]


def exported(source: Path) -> list[str]:
    """The names in the module's ``__all__`` (a literal list), without importing it."""
    for node in ast.parse(source.read_text("utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{source} has no __all__")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-6000:]}"
    return out


def test_the_site_builds_strict_with_the_memory_and_exceptions_pages(site: Path) -> None:
    memory = site / "reference" / "memory" / "index.html"
    exceptions = site / "reference" / "exceptions" / "index.html"
    assert memory.is_file()
    assert exceptions.is_file()
    assert 'id="deepcrew_episodic.EpisodicMemory"' in memory.read_text("utf-8")
    page = exceptions.read_text("utf-8")
    for name in exported(PACKAGE / "_exceptions.py"):
        assert f'id="deepcrew_episodic.{name}"' in page, f"{name} is not on the exceptions page"


def test_every_public_name_has_its_reference_entry(site: Path) -> None:
    reference = "".join(
        page.read_text("utf-8") for page in (site / "reference").rglob("index.html")
    )
    missing = [
        f"{module}.{name}"
        for module, source in PUBLIC_MODULES.items()
        for name in exported(source)
        if f'id="{module}.{name}"' not in reference
    ]
    assert not missing, f"public names missing from docs/reference/: {missing}"
