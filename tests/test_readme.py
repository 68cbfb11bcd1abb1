"""The README's two set-up commands are a contract with every new user."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section, re.S)


def test_readme_has_exactly_two_setup_commands() -> None:
    quickstart, tests = setup_commands()
    assert "examples/quickstart.py" in quickstart
    assert "pytest" in tests


def test_ci_runs_the_readme_test_command() -> None:
    _, tests = setup_commands()
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests in ci.splitlines()
